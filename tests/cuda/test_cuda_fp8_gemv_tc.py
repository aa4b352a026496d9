"""LinearFp8's tensor-core fused GEMV (ort_ops/cuda/linear_fp8_gemv_tc_impl.cu) against the float64
reference of pyquant.reference with docs/ops.md's error limit.

The kernel quantizes X once per CTA into shared memory as fp16 and runs e4m3 -> fp16 weights
through m16n8k16 MMAs with the tokens as the MMA's columns (grid rows of 8 tokens up to M = 8, of
16 above). Pinned with PYQUANT_FP8_GEMV=tc (automatic configuration) / tc1..tc5 and the Hopper GEMM
off, so that it serves every M that fits its shared memory; where it does not fit (K = 16400 from
M = 5, block sizes 16 / 32) the mma.sync kernels serve the call and must pass the same checks.
Cases: N not a multiple of 16 (clamped rows), K not a multiple of 64 (the tail unit's pieces
past K), K < 64, per-channel and per-K-block (64 / 128) weight scales, static and dynamic
activation scales, with and without bias; NaN / zero / infinite / saturating activations.
Outputs are poisoned (NaN) before each run (run_cuda).
"""

from __future__ import annotations

import pytest

from tests.cuda.test_cuda_ops import _check_fp8, _check_fp8_specials, _fp8_case, _session

pytestmark = pytest.mark.cuda

TC_M = [1, 2, 3, 8, 9, 16, 17, 40]


def _tc_session(model, gemv: str = "tc", ctas: str | None = None):
    env = {"PYQUANT_FP8_GEMV": gemv, "PYQUANT_FP8_SM90_MIN_M": str(1 << 40)}
    if ctas is not None:
        env["PYQUANT_FP8_TC_CTAS"] = ctas
    return _session(model, env=env)


@pytest.mark.parametrize("gemv", ["tc", "tc1", "tc2", "tc3", "tc4", "tc5"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 64, 128])
@pytest.mark.parametrize("x_scale", [None, 0.02])
@pytest.mark.parametrize("kn", [(4096, 200), (1008, 37), (16400, 40), (48, 3)])
def test_fp8_gemv_tc(rng, gemv, dtype, block_size, x_scale, kn):
    k, n = kn
    with_bias = bool(rng.integers(0, 2))
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, x_scale, with_bias)
    sess = _tc_session(model, gemv)
    _check_fp8(sess, rng, TC_M, k, n, dtype, w8, ws, block_size, x_scale, bias_t)


@pytest.mark.parametrize("ctas", ["1", "3"])
@pytest.mark.parametrize("gemv", ["tc", "tc4", "tc5"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 128])
@pytest.mark.parametrize("kn", [(4096, 200), (1008, 37), (2048, 1000)])
def test_fp8_gemv_tc_groups_per_cta(rng, ctas, gemv, dtype, block_size, kn):
    """The grid capped at 1 / 3 CTAs (PYQUANT_FP8_TC_CTAS): each CTA walks several row-tile groups
    (13 / 3 / 63 groups of 16 rows at one tile per group, 7 / 2 / 32 at two), one barrier and one
    output store per group, weight loads running ahead across groups; 8- and 16-token grid rows."""
    k, n = kn
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, None, True)
    sess = _tc_session(model, gemv, ctas)
    _check_fp8(sess, rng, [1, 5, 8, 9, 16, 40], k, n, dtype, w8, ws, block_size, None, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 16, 128])
@pytest.mark.parametrize("kn", [(4096, 4096), (14336, 512), (2048, 1000)])
def test_fp8_gemv_tc_layers(rng, dtype, block_size, kn):
    """Layer-sized problems (256 / 32 / 63 row tiles; 4096 x 4096 has about one group per resident
    CTA on an H100 / H200), M = 1 .. 16; block 16 falls back to the mma kernels."""
    k, n = kn
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, None, True)
    _check_fp8(_tc_session(model), rng, [1, 4, 8, 12, 16], k, n, dtype, w8, ws, block_size, None, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("m", [3, 9, 12])
def test_fp8_gemv_tc_specials(rng, dtype, m):
    """NaN / zero / infinite rows and a saturating static scale (_check_fp8_specials); large
    activations (|x| up to ~4e4, within fp16) that the dynamic scale maps into e4m3."""
    k, n = 1024, 72
    _check_fp8_specials(_tc_session, rng, m, k, n, dtype)
    model, w8, ws, bias_t = _fp8_case(rng, k, n, 128, dtype, None, False)
    _check_fp8(_tc_session(model), rng, [m], k, n, dtype, w8, ws, 128, None, bias_t, scale=1e4)
