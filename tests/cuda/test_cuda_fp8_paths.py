"""LinearFp8's CUDA dispatch paths (ort_ops/cuda/linear_fp8_impl.cu) against the float64 reference
of pyquant.reference with docs/ops.md's error limit:

* activation quantizers: the 512-thread-per-row kernel (M <= 16), the warp-per-row kernel (M > 16),
  rows held in registers (K <= 4096 for fp16) or read twice (longer K), and the scalar kernel for
  rows that are not 16-byte multiples (K = 100 with fp16 -> 200 bytes);
* the small-M mma.sync kernel: M <= 8 (kLow8 variant) and 9..16;
* the Hopper CUTLASS FP8 GEMM (sm90/fp8_gemm_sm90.cu) for M > 16, per-channel scales, fp16 / bf16:
  M = 17, 64 (narrow tile), 65, 255, 256 (wide tile), 4097; N a multiple of 8 but not of 128;
  K = 16 * odd; static and dynamic activation scales; with and without bias; also forced down to
  M = 1 (PYQUANT_FP8_SM90_MIN_M=1) and compared with the portable kernels;
* per-K-block weight scales (portable kernel at every M).

On a GPU other than compute capability 9.0, or a build without the sm90 kernels, the same cases
run the portable kernels and must pass the same checks. Outputs are poisoned (NaN) before each
run (run_cuda).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.cuda.test_cuda_ops import _as_t, _check_fp8, _fp8_case, _session, run_cuda

pytestmark = pytest.mark.cuda

GEMV_M = [1, 2, 7, 8, 9, 15, 16]
SM90_M = [17, 64, 65, 255, 256]


def _fp8_session(model, min_m: int | None = None):
    """Session whose LinearFp8 kernels read PYQUANT_FP8_SM90_MIN_M = min_m at creation."""
    if min_m is not None:
        os.environ["PYQUANT_FP8_SM90_MIN_M"] = str(min_m)
    try:
        return _session(model)
    finally:
        os.environ.pop("PYQUANT_FP8_SM90_MIN_M", None)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 128])
@pytest.mark.parametrize("x_scale", [None, 0.02])
@pytest.mark.parametrize("kn", [(4096, 200), (1008, 264), (16400, 40), (100, 24)])
def test_fp8_gemv_paths(rng, dtype, block_size, x_scale, kn):
    """M <= 16: the small-M kernel (both variants) after the 512-thread quantizer; K = 16400 needs
    more than 4 vectors per thread (the two-pass branch, every dtype); K = 100: the
    scalar quantizer and the reference GEMM."""
    k, n = kn
    with_bias = bool(rng.integers(0, 2))
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, x_scale, with_bias)
    sess = _fp8_session(model)
    _check_fp8(sess, rng, GEMV_M, k, n, dtype, w8, ws, block_size, x_scale, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("x_scale", [None, 0.02])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("kn", [(4096, 520), (1008, 264), (48, 200), (6160, 8)])
def test_fp8_sm90_shapes(rng, dtype, x_scale, with_bias, kn):
    """M > 16, per-channel: the Hopper GEMM on sm_90 (the warp-per-row quantizer in front)."""
    k, n = kn
    model, w8, ws, bias_t = _fp8_case(rng, k, n, 0, dtype, x_scale, with_bias)
    sess = _fp8_session(model)
    _check_fp8(sess, rng, SM90_M, k, n, dtype, w8, ws, 0, x_scale, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 128])
def test_fp8_large_m(rng, dtype, block_size):
    """M = 4097: many waves of output tiles (sm90) / of the portable kernel (block scales)."""
    k, n = 1024, 264
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, None, True)
    sess = _fp8_session(model)
    _check_fp8(sess, rng, [4097], k, n, dtype, w8, ws, block_size, None, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fp8_sm90_from_m1(rng, dtype):
    """The Hopper GEMM forced down to M = 1: partial tiles along the token extent everywhere."""
    k, n = 512, 136
    model, w8, ws, bias_t = _fp8_case(rng, k, n, 0, dtype, None, True)
    sess = _fp8_session(model, min_m=1)
    _check_fp8(sess, rng, [1, 2, 3, 8, 16, 33], k, n, dtype, w8, ws, 0, None, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fp8_sm90_deterministic_and_matches_portable(rng, dtype):
    """Stream-K reduces partial tiles in a fixed order (same bits run to run); the portable
    kernels (PYQUANT_FP8_SM90_MIN_M huge) agree within the error limit."""
    k, n = 4096, 512
    model, w8, ws, bias_t = _fp8_case(rng, k, n, 0, dtype, None, True)
    fast = _fp8_session(model)
    portable = _fp8_session(model, min_m=1 << 40)
    for m in [64, 300]:
        x = _as_t(rng.standard_normal((m, k)), dtype)
        y0 = run_cuda(fast, x, n, dtype)
        for _ in range(2):
            np.testing.assert_array_equal(run_cuda(fast, x, n, dtype), y0)
        y_port = run_cuda(portable, x, n, dtype)
        assert np.abs(y0 - y_port).max() <= 2e-2 * np.abs(y_port).max()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("m", [3, 40])
def test_fp8_quantizer_specials(rng, dtype, m):
    """NaN row, all-zero row, an infinite element (row -> NaN), saturation under a static scale,
    through both vectorized quantizers (M <= 16 and M > 16) and the GEMV / GEMM behind them."""
    from pyquant.ops_spec import FP8_OP
    from pyquant.reference import assert_within_limit, linear_fp8_ref

    k, n = 512, 64
    for x_scale in (None, 0.001):
        model, w8, ws, bias_t = _fp8_case(rng, k, n, 0, dtype, x_scale, True)
        sess = _fp8_session(model)
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
