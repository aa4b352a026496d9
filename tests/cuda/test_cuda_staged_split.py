"""The staged kernels' two-level K split (ort_ops/cuda/staged_split.h, session 24), both ops, against
the float64 reference: clusters of ks CTAs (PYQUANT_STAGED_MAX_CLUSTER) and kz groups along grid.z
(PYQUANT_STAGED_SPLIT_Z) whose partial slices meet in a per-stream fp32 buffer, the last group to
arrive adding them in z order. Cases: N not a multiple of the CTA's channels (nor of 16), partial
token rows (M = 33, 65, 129, 200, 255), K split into up to 64 parts, fp16 / bf16, symmetric /
asymmetric INT4, per-channel / per-block FP8, bias. Outputs are poisoned before each run.

Also: the result is bit-identical run to run and across interleaved shapes (the arrival counters
re-arm themselves; the sum order does not depend on which group arrives last), and between an
uncaptured session and a CUDA-graph replay of the same shape; and with 8 threads over 2 sessions.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.cuda.test_cuda_ops import _as_t, _check_fp8, _check_int4, _fp8_case, _int4_case, _session, run_cuda

pytestmark = pytest.mark.cuda

# (cluster cap, grid-split cap); "" = the default, "1/1" = no split at all, "8/1" = the session-23 split
SPLITS = [("", ""), ("8", "1"), ("8", "2"), ("4", "4"), ("2", "8"), ("1", "8"), ("1", "1")]
M_LIST = [5, 17, 33, 64, 65, 129, 200, 256]


def _split_env(split):
    cluster, z = split  # "": the default (fitted to one wave)
    return {k: v for k, v in (("PYQUANT_STAGED_MAX_CLUSTER", cluster), ("PYQUANT_STAGED_SPLIT_Z", z)) if v}


def _int4_env(split, pinned):
    # the staged kernel at every M of the list: pinned (Hopper GEMM off) to M = 64; above 64 the default
    # dispatch, whose above-64 rule takes every narrow layer to M = 256 with PYQUANT_INT4_STAGED_MAX_M
    # set (a cap for both kinds of narrow layer)
    # (a pinned variant would not reach it: the tiled kernel serves M > 64 then)
    env = {**_split_env(split), "PYQUANT_INT4_SM90_MIN_M": str(1 << 40), "PYQUANT_INT4_STAGED_MAX_M": "256"}
    if pinned:
        env["PYQUANT_INT4_MID_VARIANT"] = "11"
    return env


def _fp8_env(split):
    return {**_split_env(split), "PYQUANT_FP8_GEMV": "staged", "PYQUANT_FP8_SM90_MIN_M": str(1 << 40)}


@pytest.mark.parametrize("split", SPLITS, ids=lambda s: f"c{s[0]}z{s[1]}" if s[0] else "default")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("kn", [(14336, 264), (8192, 1000), (4096, 40)])
def test_int4_staged_split(rng, split, dtype, symmetric, kn):
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, 128, dtype, symmetric, True)
    for pinned in (True, False):
        m_list = [m for m in M_LIST if (m <= 64) == pinned]
        sess = _session(model, env=_int4_env(split, pinned))
        _check_int4(sess, rng, m_list, k, n, 128, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("split", SPLITS, ids=lambda s: f"c{s[0]}z{s[1]}" if s[0] else "default")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 128])
@pytest.mark.parametrize("kn", [(14336, 264), (8192, 1000), (4096, 40)])
def test_fp8_staged_split(rng, split, dtype, block_size, kn):
    k, n = kn
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, None, True)
    sess = _session(model, env=_fp8_env(split))
    _check_fp8(sess, rng, M_LIST, k, n, dtype, w8, ws, block_size, None, bias_t)


@pytest.mark.parametrize("op", ["int4", "fp8"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_staged_split_bit_identical(rng, op, dtype):
    """Deep grid splits (clusters of 2 x 8 groups) give the same bits every run, with runs of other
    shapes in between on the same stream (which reuse the shared buffers and counters), and (fp16)
    in CUDA-graph replays."""
    k, n = 8192, 1000
    if op == "int4":
        model = _int4_case(rng, k, n, 128, dtype, False, True)[0]
        env = _int4_env(("2", "8"), False)  # by default on this layer at M = 7, 64, 100
    else:
        model = _fp8_case(rng, k, n, 0, dtype, None, True)[0]
        env = _fp8_env(("2", "8"))
    sess = _session(model, env=env)
    xs = {m: _as_t(rng.standard_normal((m, k)), dtype) for m in (64, 100, 7)}
    first = {m: run_cuda(sess, x, n, dtype) for m, x in xs.items()}
    for _ in range(3):
        for m in (100, 7, 64):
            np.testing.assert_array_equal(run_cuda(sess, xs[m], n, dtype), first[m], err_msg=f"M={m}")
    if dtype == "float16":  # (bf16 has no numpy type for OrtValue)
        _assert_graph_replay_equal(model, env, xs[100].astype(np.float16), first[100], n)


def _assert_graph_replay_equal(model, env, x, expected, n):
    """The same shape through a session with ORT's CUDA graphs: ORT's uncaptured warm-up runs (which
    allocate the split buffers), the capture, then replays; every output equals `expected`."""
    import os

    import onnxruntime as ort

    from tests.cuda.test_cuda_reliability import cuda_session

    os.environ.update(env)
    try:
        graphed = cuda_session(model, cuda_graph=True)
    finally:
        for key in env:
            os.environ.pop(key, None)
    x_dev = ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    y_dev = ort.OrtValue.ortvalue_from_shape_and_type([x.shape[0], n], x.dtype, "cuda", 0)
    io = graphed.io_binding()
    io.bind_ortvalue_input("X", x_dev)
    io.bind_ortvalue_output("Y", y_dev)
    for i in range(5):
        graphed.run_with_iobinding(io)
        y = np.asarray(y_dev.numpy(), dtype=np.float64)
        np.testing.assert_array_equal(y, expected, err_msg=f"graph run {i}")


@pytest.mark.parametrize("op", ["int4", "fp8"])
def test_staged_split_concurrent_sessions(rng, op):
    """8 threads over 2 sessions (ORT issues concurrent runs on different CUDA streams, each with
    its own split buffers and counters; runs on one stream share them), grid-split layers at
    M = 7 / 64 / 100 / 200: every result bit-identical to a serial run."""
    from tests.cuda.test_cuda_reliability import assert_concurrent_runs_bit_identical

    k, n, dtype = 8192, 1000, "float16"
    if op == "int4":
        model = _int4_case(rng, k, n, 128, dtype, False, True)[0]
        env = _int4_env(("2", "8"), False)
    else:
        model = _fp8_case(rng, k, n, 0, dtype, None, True)[0]
        env = _fp8_env(("2", "8"))
    sessions = [_session(model, env=env) for _ in range(2)]
    xs = [rng.standard_normal((m, k)).astype(np.float16) for m in (7, 64, 100, 200)]
    assert_concurrent_runs_bit_identical(sessions, xs, jobs=64)
