"""pyquant's CUDA kernels, run through ORT's CUDA execution provider, against the float64
references of pyquant.reference (docs/ops.md's error limit).

Every run goes through IOBinding with the output bound to a device buffer pre-filled with NaN, so
an element a kernel forgets to write shows up as a NaN where the reference has a number. The CPU
fallback of ORT is disabled, so a node that cannot run on the CUDA EP fails the test instead of
silently running our CPU kernel.

Shapes are chosen to walk every dispatch path of ort_ops/cuda (see matmul_int4_impl.cu and
linear_fp8_impl.cu): the reference kernels (fp32 MatMulInt4, block sizes 16/256, K not a multiple
of 8 / 16), the small-M tensor-core kernels (M <= 32), the tiled large-M kernels, K tails inside
the last block, odd N and M = 0.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.cuda

DTYPES = ["float32", "float16", "bfloat16"]
M_LIST = [0, 1, 2, 3, 16, 17, 33, 64, 65, 255]


def _torch():
    import torch

    return torch


def _session(model, tiled_min_m=None, env: dict | None = None):
    """CUDA-only session. env: the library's environment knobs (PYQUANT_*), set while the session
    is created, when its kernels read them. tiled_min_m: MatMulInt4's switch to the tiled kernel
    (PYQUANT_INT4_TILED_MIN_M), to test that kernel at small M too."""
    import os

    import onnxruntime as ort

    from pyquant.ort import session_options

    so = session_options()
    # Our node must run on the CUDA EP: CUDA alone, no silent fallback to the CPU kernels.
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    env = dict(env or {})
    if tiled_min_m is not None:
        env["PYQUANT_INT4_TILED_MIN_M"] = str(tiled_min_m)
    os.environ.update(env)
    try:
        return ort.InferenceSession(
            model.SerializeToString(), sess_options=so, providers=["CUDAExecutionProvider"]
        )
    finally:
        for key in env:
            os.environ.pop(key, None)


def _torch_dtype(dtype):
    torch = _torch()
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]


def _onnx_type(dtype):
    from tests.ops.graphs import ONNX_TYPE

    return ONNX_TYPE[dtype]


def run_cuda(sess, x: np.ndarray, n: int, dtype: str) -> np.ndarray:
    """Runs X -> Y on the device through IOBinding; Y is pre-filled with NaN (poison)."""
    torch = _torch()
    from tests.ops.graphs import np_dtype, run_session

    if x.size == 0:  # nothing to bind on the device
        return np.asarray(run_session(sess, x.astype(np_dtype(dtype))), dtype=np.float64)
    td = _torch_dtype(dtype)
    xt = torch.from_numpy(np.ascontiguousarray(x).astype(np.float32)).to(td).cuda().contiguous()
    y_shape = list(x.shape[:-1]) + [n]
    yt = torch.full(y_shape, float("nan"), dtype=td, device="cuda")
    io = sess.io_binding()
    io.bind_input("X", "cuda", 0, _onnx_type(dtype), list(xt.shape), xt.data_ptr())
    io.bind_output("Y", "cuda", 0, _onnx_type(dtype), y_shape, yt.data_ptr())
    torch.cuda.synchronize()
    sess.run_with_iobinding(io)
    torch.cuda.synchronize()
    return yt.float().cpu().numpy().astype(np.float64)


def _as_t(a: np.ndarray, dtype: str) -> np.ndarray:
    """a rounded to T, back as float64 (what the op sees)."""
    from tests.ops.graphs import np_dtype

    return np.asarray(a).astype(np.float32).astype(np_dtype(dtype)).astype(np.float64)


# ----------------------------------------------------------------------------------------------
# MatMulInt4
# ----------------------------------------------------------------------------------------------


def _int4_case(rng, k, n, bs, dtype, symmetric, with_bias):
    from pyquant import layout
    from tests.ops.graphs import int4_model

    w = rng.standard_normal((n, k)).astype(np.float32)
    b, scales, zp = layout.quantize_int4_rtn(w, bs, symmetric=symmetric)
    if not symmetric:
        # random zero points and codes over the whole 0..15 range, padding codes random too
        nb = layout.n_blocks(k, bs)
        b = rng.integers(0, 256, size=b.shape, dtype=np.uint8)
        zp = layout.pack_zero_points(rng.integers(0, 16, size=(n, nb), dtype=np.uint8))
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    model = int4_model(b, scales, k, n, bs, dtype=dtype, zero_points=zp, bias=bias)
    scales_t = _as_t(scales, dtype)
    bias_t = _as_t(bias, dtype) if bias is not None else None
    return model, b, scales_t, zp, bias_t


def _check_int4(sess, rng, m_list, k, n, bs, dtype, b, scales_t, zp, bias_t, lead=None):
    from pyquant.reference import assert_within_limit, matmul_int4_ref

    for m in m_list:
        shape = (m, k) if lead is None else (*lead, k)
        x = _as_t(rng.standard_normal(shape), dtype)
        y = run_cuda(sess, x, n, dtype)
        y_ref, mag = matmul_int4_ref(x, b, scales_t, k, n, bs, zp, bias_t)
        try:
            assert_within_limit(y, y_ref, mag, dtype)
        except AssertionError as e:
            raise AssertionError(f"M={m} K={k} N={n} block={bs} {dtype}: {e}") from None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bs", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("k", [256, 200, 100])
@pytest.mark.parametrize("tiled_min_m", [None, 33])
def test_matmul_int4_cuda(rng, dtype, bs, symmetric, with_bias, k, tiled_min_m):
    n = 37  # odd N, not a multiple of any tile
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, with_bias)
    sess = _session(model, tiled_min_m)
    _check_int4(sess, rng, M_LIST, k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bs", [32, 64, 128])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("kn", [(4096, 520), (1000, 264), (4160, 77)])
@pytest.mark.parametrize("tiled_min_m", [None, 33])
def test_matmul_int4_cuda_large(rng, dtype, bs, symmetric, kn, tiled_min_m):
    """Long K (many chunks, split over warps), N across several CTAs, K tail (1000 % 128 != 0)."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _session(model, tiled_min_m)
    _check_int4(sess, rng, [1, 5, 9, 16, 31, 48, 100, 300, 600], k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 5, 48, 300])
def test_matmul_int4_cuda_accuracy_level_4_is_a_minimum(rng, dtype, m):
    """docs/ops.md: the CUDA EP takes accuracy_level 4 as a minimum and computes with X unquantized,
    so the node runs (no CPU fallback) and its output is bit-identical to level 0's."""
    from onnx import helper

    from tests.ops.graphs import int4_model

    k, n, bs = 512, 72, 64
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, False, True)
    model.graph.node[0].attribute.append(helper.make_attribute("accuracy_level", 4))
    level0 = int4_model(b, scales_t.astype(np.float32), k, n, bs, dtype=dtype, zero_points=zp, bias=bias_t)
    x = _as_t(rng.standard_normal((m, k)), dtype)
    y4 = run_cuda(_session(model), x, n, dtype)
    np.testing.assert_array_equal(y4, run_cuda(_session(level0), x, n, dtype))
    _check_int4(_session(model), rng, [m], k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_int4_cuda_leading_dims(rng, dtype):
    k, n, bs = 256, 40, 32
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, False, True)
    from tests.ops.graphs import int4_model

    model = int4_model(
        b,
        scales_t.astype(np.float32),
        k,
        n,
        bs,
        dtype=dtype,
        zero_points=zp,
        bias=bias_t.astype(np.float32),
        x_shape=("A", "B", None),
    )
    sess = _session(model)
    _check_int4(sess, rng, [None], k, n, bs, dtype, b, scales_t, zp, bias_t, lead=(3, 7))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 20, 100])
def test_matmul_int4_cuda_nan_and_zero_scale(rng, dtype, m):
    """A NaN in a row of X makes that row NaN; a zero scale gives exact zeros from its block."""
    from pyquant.reference import assert_within_limit, matmul_int4_ref

    k, n, bs = 256, 24, 64
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, True, False)
    from tests.ops.graphs import int4_model

    scales_t = scales_t.copy()
    scales_t[:, 1] = 0.0
    model = int4_model(b, scales_t.astype(np.float32), k, n, bs, dtype=dtype)
    sess = _session(model)
    x = _as_t(rng.standard_normal((m, k)), dtype)
    x[m // 2, 7] = np.nan
    y = run_cuda(sess, x, n, dtype)
    y_ref, mag = matmul_int4_ref(x, b, scales_t, k, n, bs)
    assert np.isnan(y[m // 2]).all()
    assert_within_limit(y, y_ref, mag, dtype)


def test_matmul_int4_cuda_errors(rng):
    from tests.ops.graphs import int4_model

    k, n, bs = 128, 16, 32
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, "float16", True, False)
    model = int4_model(b, scales_t.astype(np.float32), k, n, bs, dtype="float16", x_shape=("M", "Kx"))
    sess = _session(model)
    with pytest.raises(Exception, match=r"int4_node.*last dim 100 but attribute K is 128"):
        run_cuda(sess, rng.standard_normal((2, 100)).astype(np.float32), n, "float16")
    bad = int4_model(b[:, :-1], scales_t.astype(np.float32)[:, :-1], k, n, bs, dtype="float16")
    with pytest.raises(Exception, match=r"int4_node.*'B' must have shape"):
        _session(bad)


# ----------------------------------------------------------------------------------------------
# LinearFp8
# ----------------------------------------------------------------------------------------------


def _fp8_case(rng, k, n, block_size, dtype, x_scale, with_bias):
    from pyquant import layout
    from tests.ops.graphs import fp8_model

    w = rng.standard_normal((n, k)).astype(np.float32)
    w8, ws = layout.quantize_weight_fp8(w, block_size)
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    model = fp8_model(w8, ws, dtype=dtype, block_size=block_size, x_scale=x_scale, bias=bias)
    return model, w8, ws, (_as_t(bias, dtype) if bias is not None else None)


def _check_fp8(sess, rng, m_list, k, n, dtype, w8, ws, block_size, x_scale, bias_t, scale=1.0):
    from pyquant.ops_spec import FP8_OP
    from pyquant.reference import assert_within_limit, linear_fp8_ref

    for m in m_list:
        x = _as_t(scale * rng.standard_normal((m, k)), dtype)
        y = run_cuda(sess, x, n, dtype)
        y_ref, mag = linear_fp8_ref(x, w8, ws, block_size, x_scale, bias_t)
        try:
            assert_within_limit(y, y_ref, mag, dtype, op=FP8_OP)
        except AssertionError as e:
            raise AssertionError(
                f"M={m} K={k} N={n} block={block_size} x_scale={x_scale} {dtype}: {e}"
            ) from None


def _check_fp8_specials(make_session, rng, m, k, n, dtype):
    """Row 1 with a NaN element (the row -> NaN), row 2 all zero (scale 1) and, with the dynamic
    scale, an infinite element in row m - 1 (amax = inf: the row -> NaN); the static scale 0.001
    saturates (|x / s| > 448). `make_session(model)` opens the session under test; m >= 3."""
    from pyquant.ops_spec import FP8_OP
    from pyquant.reference import assert_within_limit, linear_fp8_ref

    for x_scale in (None, 0.001):
        model, w8, ws, bias_t = _fp8_case(rng, k, n, 0, dtype, x_scale, True)
        sess = make_session(model)
        x = _as_t(rng.standard_normal((m, k)), dtype)
        x[1, 3] = np.nan
        x[2] = 0.0
        if x_scale is None:
            x[m - 1, 7] = np.inf
        y = run_cuda(sess, x, n, dtype)
        y_ref, mag = linear_fp8_ref(x, w8, ws, 0, x_scale, bias_t)
        assert np.isnan(y[1]).all()
        if x_scale is None:
            assert np.isnan(y[m - 1]).all()
        assert_within_limit(y, y_ref, mag, dtype, op=FP8_OP)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [0, 16, 64, 128])
@pytest.mark.parametrize("x_scale", [None, 0.02])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("k", [256, 240, 100])
def test_linear_fp8_cuda(rng, dtype, block_size, x_scale, with_bias, k):
    n = 37
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, x_scale, with_bias)
    sess = _session(model)
    _check_fp8(sess, rng, M_LIST, k, n, dtype, w8, ws, block_size, x_scale, bias_t)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [0, 128])
@pytest.mark.parametrize("kn", [(4096, 520), (1024, 264), (4160, 77)])
def test_linear_fp8_cuda_large(rng, dtype, block_size, kn):
    k, n = kn
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, None, True)
    sess = _session(model)
    _check_fp8(sess, rng, [1, 5, 9, 16, 31, 48, 100, 300, 600], k, n, dtype, w8, ws, block_size, None, bias_t)


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_fp8_cuda_saturation_and_nan(rng, dtype):
    """Static scale that saturates (|x / s| > 448), a NaN row, an all-zero row."""
    from pyquant.ops_spec import FP8_OP
    from pyquant.reference import assert_within_limit, linear_fp8_ref

    k, n = 256, 40
    for x_scale in (None, 0.001):
        model, w8, ws, bias_t = _fp8_case(rng, k, n, 0, dtype, x_scale, True)
        sess = _session(model)
        x = _as_t(rng.standard_normal((5, k)), dtype)
        x[1, 3] = np.nan
        x[2] = 0.0
        y = run_cuda(sess, x, n, dtype)
        y_ref, mag = linear_fp8_ref(x, w8, ws, 0, x_scale, bias_t)
        assert np.isnan(y[1]).all()
        assert_within_limit(y, y_ref, mag, dtype, op=FP8_OP)


def test_linear_fp8_cuda_errors(rng):
    k, n = 64, 16
    from tests.ops.graphs import fp8_model

    model, w8, ws, _ = _fp8_case(rng, k, n, 0, "float16", None, False)
    sess = _session(fp8_model(w8, ws, dtype="float16", x_shape=("M", "Kx")))
    with pytest.raises(Exception, match=r"fp8_node.*last dim 32 but W has K = 64"):
        run_cuda(sess, rng.standard_normal((2, 32)).astype(np.float32), n, "float16")
    for bad_scale in (0.0, -1.0, float("inf")):
        model, *_ = _fp8_case(rng, k, n, 0, "float16", bad_scale, False)
        with pytest.raises(Exception, match=r"fp8_node.*x_scale.*finite and > 0"):
            sess = _session(model)
            run_cuda(sess, rng.standard_normal((2, k)).astype(np.float32), n, "float16")
