"""Every M <= 8 (decode) kernel variant of MatMulInt4 (PYQUANT_INT4_GEMV_VARIANT, read at kernel
creation; matmul_int4_impl.cu: 0..5 mma.sync small-M, matmul_int4_gemv_impl.cu: 6..11 CUDA-core
GEMV for M <= 4 and K % 32 == 0) against the float64 reference: odd N (partial row groups), K
tails inside the last block, K % 32 != 0 (the CUDA-core variants fall back), block sizes
32..256, symmetric and asymmetric, bias, fp16 and bf16. Outputs are poisoned (NaN) before each
run."""

from __future__ import annotations

import pytest

from tests.cuda.test_cuda_ops import _check_int4, _int4_case, _session

pytestmark = pytest.mark.cuda

N_VARIANTS = 12


@pytest.mark.parametrize("variant", range(N_VARIANTS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bs", [32, 128])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("kn", [(4096, 520), (1000, 37), (200, 24), (960, 37), (14336, 3)])
def test_int4_gemv_variants(rng, variant, dtype, bs, symmetric, kn):
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _session(model, env={"PYQUANT_INT4_GEMV_VARIANT": str(variant)})
    _check_int4(sess, rng, [1, 2, 3, 4, 5, 8], k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("variant", [-1, 6, 7, 8, 9, 10, 11])
@pytest.mark.parametrize("bs", [64, 256])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("nonfinite_scale", [False, True])
def test_int4_gemv_cc_large_activations(rng, variant, bs, dtype, nonfinite_scale):
    """|X| = 4000 with small scales: the true sums are finite, but the CUDA-core GEMV's fast path
    (unscaled q - zp in fp16 chains of 4) overflows, so those pieces must take the slow path
    (weights scaled first); also non-finite scales (the slow path's per-weight IEEE semantics)."""
    import numpy as np

    from pyquant import layout
    from pyquant.reference import assert_within_limit, matmul_int4_ref
    from tests.cuda.test_cuda_ops import _as_t, run_cuda
    from tests.ops.graphs import int4_model

    k, n = 2048, 40
    # codes over the whole 0..15 range with random zero points: |q - zp| up to 15, so unscaled
    # (q - zp) * x would reach 6e4 per product; scales ~ 0.005 keep every true partial sum small.
    nb = layout.n_blocks(k, bs)
    b = rng.integers(0, 256, size=(n, nb, bs // 2), dtype=np.uint8)
    zp = layout.pack_zero_points(rng.integers(0, 16, size=(n, nb), dtype=np.uint8))
    scales = (0.004 + 0.002 * rng.random((n, nb))).astype(np.float32)
    if nonfinite_scale:  # IEEE semantics per weight: 0 * inf = NaN, as in the reference
        scales[3, 0], scales[7, 1] = np.inf, np.nan
    model = int4_model(b, scales, k, n, bs, dtype=dtype, zero_points=zp, bias=None)
    scales_t, bias_t = _as_t(scales, dtype), None
    sess = _session(model, env={"PYQUANT_INT4_GEMV_VARIANT": str(variant)} if variant >= 0 else None)
    for m in (1, 4):
        x = _as_t(np.sign(rng.standard_normal((m, k))) * 4000.0, dtype)
        y = run_cuda(sess, x, n, dtype)
        y_ref, mag = matmul_int4_ref(x, b, scales_t, k, n, bs, zp, bias_t)
        assert nonfinite_scale or np.isfinite(y_ref).all()
        assert_within_limit(y, y_ref, mag, dtype)
