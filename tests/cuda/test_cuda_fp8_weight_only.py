"""LinearFp8 with weight_only = 1 on the CUDA EP (ort_ops/cuda/linear_fp8_weight_only_impl.cu) against
the float64 reference (pyquant.reference.linear_fp8_ref(..., weight_only=True)) with docs/ops.md's
error limit, outputs poisoned before each run (run_cuda):

* the fused GEMV without its quantization at M = 1, 2 (fp16 / bf16, K % 16 == 0);
* fp8_wo_mma_kernel's three shapes: M <= 8 (rows g + 8 not loaded), 9..16, and above 16 (two m16
  tiles x 4 column tiles per warp: partial token and channel tiles, M = 4097 = many grid rows);
* per-channel and per-K-block (64 / 128 / 256) weight scales, K a multiple of 16 that is not one
  of 64 (a chunk with fewer than four 16-k pieces), N not a multiple of 8 or 32;
* the Hopper mixed-input GEMM (sm90/fp8_wo_gemm_sm90.cu) from M = 17 with per-channel scales where
  N % 8 == 0 (its three tiles: M <= 64, <= 512, above), and the mma kernel in its place
  (PYQUANT_FP8_SM90_MIN_M huge), on a GPU other than sm_90 the mma kernel in both;
* the reference kernel: float32 X, block sizes 16 / 32, K % 16 != 0, and PYQUANT_CUDA_KERNELS=ref.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.cuda.test_cuda_ops import _as_t, _session, run_cuda

pytestmark = pytest.mark.cuda

M_LIST = [1, 2, 3, 8, 9, 16, 17, 33, 64, 65, 255]


def _case(rng, k, n, block_size, dtype, with_bias):
    from pyquant import layout
    from tests.ops.graphs import fp8_model

    w = rng.standard_normal((n, k)).astype(np.float32)
    w8, ws = layout.quantize_weight_fp8(w, block_size)
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    model = fp8_model(w8, ws, dtype=dtype, block_size=block_size, bias=bias, weight_only=1)
    return model, w8, ws, (_as_t(bias, dtype) if bias is not None else None)


def _check(sess, rng, m_list, k, n, dtype, w8, ws, block_size, bias_t):
    from pyquant.ops_spec import FP8_OP
    from pyquant.reference import assert_within_limit, linear_fp8_ref

    for m in m_list:
        x = _as_t(rng.standard_normal((m, k)) * rng.uniform(0.01, 30.0, size=(m, 1)), dtype)
        y = run_cuda(sess, x, n, dtype)
        y_ref, mag = linear_fp8_ref(x, w8, ws, block_size, None, bias_t, weight_only=True)
        try:
            assert_within_limit(y, y_ref, mag, dtype, op=FP8_OP)
        except AssertionError as e:
            raise AssertionError(f"M={m} K={k} N={n} block={block_size} {dtype}: {e}") from None


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 64, 128, 256])
@pytest.mark.parametrize("kn", [(4096, 200), (1008, 37), (576, 1536), (16400, 40)])
def test_fp8_weight_only_paths(rng, dtype, block_size, kn):
    k, n = kn
    model, w8, ws, bias_t = _case(rng, k, n, block_size, dtype, with_bias=bool(rng.integers(0, 2)))
    _check(_session(model), rng, M_LIST, k, n, dtype, w8, ws, block_size, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("gemm", [True, False])
@pytest.mark.parametrize("kn", [(4096, 264), (14336, 64), (512, 4104)])
def test_fp8_weight_only_prefill(rng, dtype, gemm, kn):
    """M = 17 .. 1100 with per-channel scales: the Hopper GEMM's tiles (or, with it off, the mma kernel)."""
    k, n = kn
    model, w8, ws, bias_t = _case(rng, k, n, 0, dtype, with_bias=True)
    env = None if gemm else {"PYQUANT_FP8_SM90_MIN_M": str(1 << 40)}
    _check(_session(model, env=env), rng, [17, 64, 100, 512, 513, 1100], k, n, dtype, w8, ws, 0, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fp8_weight_only_many_rows(rng, dtype):
    k, n = 256, 100
    model, w8, ws, bias_t = _case(rng, k, n, 0, dtype, with_bias=True)
    _check(_session(model), rng, [4097], k, n, dtype, w8, ws, 0, bias_t)


@pytest.mark.parametrize(
    "dtype,block_size,k",
    [("float32", 0, 256), ("float32", 128, 300), ("float16", 32, 256), ("bfloat16", 0, 100)],
)
def test_fp8_weight_only_reference_kernel(rng, dtype, block_size, k):
    """Cases outside the fast path run the one-thread-per-output kernel."""
    n = 37
    model, w8, ws, bias_t = _case(rng, k, n, block_size, dtype, with_bias=True)
    _check(_session(model), rng, [1, 2, 17, 70], k, n, dtype, w8, ws, block_size, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fp8_weight_only_forced_reference(rng, dtype):
    """PYQUANT_CUDA_KERNELS=ref: every M through the reference kernel, same limit."""
    k, n = 1024, 72
    model, w8, ws, bias_t = _case(rng, k, n, 128, dtype, with_bias=False)
    sess = _session(model, env={"PYQUANT_CUDA_KERNELS": "ref"})
    _check(sess, rng, [1, 9, 40], k, n, dtype, w8, ws, 128, bias_t)


def test_fp8_weight_only_matches_cpu_ep(rng):
    """The same file on the CUDA and CPU EPs (both within the limit, and close to each other)."""
    from tests.ops.graphs import run

    k, n = 2048, 96
    model, w8, ws, _ = _case(rng, k, n, 0, "float16", with_bias=False)
    sess = _session(model)
    for m in (1, 5, 40):
        x = _as_t(rng.standard_normal((m, k)), "float16")
        y_gpu = run_cuda(sess, x, n, "float16")
        y_cpu = np.asarray(run(model, x.astype(np.float16)), dtype=np.float64)
        np.testing.assert_allclose(y_gpu, y_cpu, rtol=2e-3, atol=2e-3 * np.abs(y_cpu).max())
