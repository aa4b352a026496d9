"""Every 9 <= M <= 64 kernel variant of MatMulInt4 (PYQUANT_INT4_MID_VARIANT, read at kernel
creation; matmul_int4_impl.cu: int4_smallm_kernel with 1, 2, 4 or 8 column tiles per CTA and
1, 2 or 4 m16 row tiles) against the float64 reference, with the Hopper GEMM switched off so
that these kernels serve every M of the range: N not a multiple of the CTA's columns (partial
column tiles) nor of 8, K tails inside the last block, partial m16 tiles, block sizes 32..256,
symmetric and asymmetric, bias, fp16 and bf16. Outputs are poisoned (NaN) before each run."""

from __future__ import annotations

import pytest

from tests.cuda.test_cuda_ops import _check_int4, _int4_case, _session

pytestmark = pytest.mark.cuda

# 10: variant 3 in sm_90 clusters that split K (kS = 2 / 4 here, 1 off sm_90); 11..13: the staged
# kernel (auto / wide / tall CTA shape; variant 3 where block_size < 64 or K is not whole stages)
N_VARIANTS = 14


@pytest.mark.parametrize("variant", range(-1, N_VARIANTS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bs", [32, 256])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("kn", [(4096, 520), (1000, 37), (200, 24), (2048, 136)])
def test_int4_mid_variants(rng, variant, dtype, bs, symmetric, kn):
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    env = {"PYQUANT_INT4_SM90_MIN_M": str(1 << 40)}
    if variant >= 0:
        env["PYQUANT_INT4_MID_VARIANT"] = str(variant)
    sess = _session(model, env=env)
    # a pinned variant also serves M = 5..8
    m_list = ([5, 8] if variant >= 0 else []) + [9, 16, 17, 31, 33, 48, 64]
    _check_int4(sess, rng, m_list, k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("variant", range(-1, N_VARIANTS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kn", [(4096, 1000), (1000, 37)])
def test_int4_mid_two_rows(rng, variant, dtype, kn):
    """PYQUANT_INT4_MID_ROWS=32: at 33 <= M <= 64 every variant runs in two grid rows of MT = 2 m16
    tiles instead of one of MT = 4 (the second row partial at M = 33 / 40 / 63)."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, 128, dtype, False, True)
    env = {"PYQUANT_INT4_SM90_MIN_M": str(1 << 40), "PYQUANT_INT4_MID_ROWS": "32"}
    if variant >= 0:
        env["PYQUANT_INT4_MID_VARIANT"] = str(variant)
    sess = _session(model, env=env)
    _check_int4(sess, rng, [32, 33, 40, 63, 64], k, n, 128, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kn", [(9000, 40), (14336, 520)])
def test_int4_mid_k_split_clusters_of_8(rng, dtype, kn):
    """Variant 10 on long, narrow layers, where its K split reaches clusters of 8 CTAs on an H100
    (K = 9000: 71 chunks of 128, a partial last block; N = 40 / 520: 2 / 17 column tiles)."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, 64, dtype, False, True)
    sess = _session(model, env={"PYQUANT_INT4_SM90_MIN_M": str(1 << 40), "PYQUANT_INT4_MID_VARIANT": "10"})
    _check_int4(sess, rng, [5, 16, 17, 40, 64], k, n, 64, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("shape", [1, 2])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bs", [64, 128, 256])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("kn", [(4096, 520), (14336, 264), (2048, 1032), (1024, 4096), (512, 24)])
def test_int4_mid_staged(rng, shape, dtype, bs, symmetric, kn):
    """The staged kernel (matmul_int4_staged_impl.cu; variants 12 / 13 = its wide / tall CTA
    shape) wherever it applies: N not a multiple of its 256 / 128 rows (nor of 16: 264, 520, 1032,
    24), K split over clusters of 1 .. 8 CTAs on an H100 (14336 x 264: 8; 1024 x 4096: none),
    every token-tile count (M = 5 .. 64: 8, 16, 32, 64 tokens per CTA, partial ones)."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    env = {"PYQUANT_INT4_SM90_MIN_M": str(1 << 40), "PYQUANT_INT4_MID_VARIANT": str(11 + shape)}
    sess = _session(model, env=env)
    _check_int4(sess, rng, [5, 8, 9, 16, 17, 31, 33, 48, 64], k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("variant", [None, 12, 13])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kn", [(8192, 1000), (4096, 520), (14336, 264)])
def test_int4_mid_staged_two_rows(rng, variant, dtype, kn):
    """PYQUANT_INT4_MID_ROWS=32 with the staged kernel (by default on 8192 x 1000 / 14336 x 264 at
    M = 33..64, or pinned wide / tall): two grid rows of 32 tokens per CTA, the second partial at
    M = 33 / 40 / 63."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, 128, dtype, False, True)
    env = {"PYQUANT_INT4_SM90_MIN_M": str(1 << 40), "PYQUANT_INT4_MID_ROWS": "32"}
    if variant is not None:
        env["PYQUANT_INT4_MID_VARIANT"] = str(variant)
    sess = _session(model, env=env)
    _check_int4(sess, rng, [32, 33, 40, 63, 64], k, n, 128, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("variant", [None, 12, 13])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kn", [(14336, 1000), (8192, 264), (4096, 40)])
def test_int4_mid_staged_cluster16(rng, variant, dtype, kn):
    """PYQUANT_STAGED_MAX_CLUSTER=16: the staged kernel's K split in clusters of up to 16 CTAs
    (sm_90's non-portable size), by default and pinned wide / tall; on an H100 14336 x 1000 splits
    16 ways at 64 tokens per CTA. Asymmetric, partial token tiles (33, 40)."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, 128, dtype, False, True)
    env = {"PYQUANT_INT4_SM90_MIN_M": str(1 << 40), "PYQUANT_STAGED_MAX_CLUSTER": "16"}
    if variant is not None:
        env["PYQUANT_INT4_MID_VARIANT"] = str(variant)
    sess = _session(model, env=env)
    _check_int4(sess, rng, [5, 9, 17, 33, 40, 64], k, n, 128, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("max_m", [None, "64"])
@pytest.mark.parametrize("kn", [(14336, 264), (8192, 1000), (4096, 520), (4096, 40)])
def test_int4_staged_above_64(rng, dtype, symmetric, max_m, kn):
    """Narrow layers at M = 65..257 (session 23): by default on sm_90 the staged kernel in grid rows
    of 64 tokens up to M = 256 on the K-split layers (14336 x 264, 4096 x 40; partial last rows at
    65 / 129 / 200 / 255) and up to 192 on the two-row ones with K <= 8192 (8192 x 1000, 4096 x 520;
    session 24), then the Hopper GEMM; PYQUANT_INT4_STAGED_MAX_M=64: the session-22 choice (the
    Hopper GEMM / tiled kernel from 65). Block 128, bias; other GPUs: the portable kernels."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, 128, dtype, symmetric, True)
    sess = _session(model, env={"PYQUANT_INT4_STAGED_MAX_M": max_m} if max_m else None)
    m_list = [65, 96, 128, 129, 200, 255, 256, 257]
    _check_int4(sess, rng, m_list, k, n, 128, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_mid_default_wide_short_rows(rng, dtype, symmetric):
    """The default dispatch on a wide layer with short rows (K <= 4096, N >= 8192): the ring kernel
    at M = 5..16 (N = 8200: a partial 32-column tile), the Hopper GEMM (where present) from 17."""
    k, n, bs = 1024, 8200, 128
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _session(model)
    _check_int4(sess, rng, [5, 8, 9, 16, 17, 40], k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("mid", [None, "nosplit", "nostaged"])
@pytest.mark.parametrize(
    "kn", [(4096, 264), (14336, 500), (2048, 40), (4096, 1000), (8200, 1024), (8192, 1000), (8192, 2056)]
)
def test_int4_mid_default_narrow(rng, dtype, symmetric, mid, kn):
    """The default dispatch on narrow layers (variant 3 has at most SMs / 8 CTAs: N <= 512 on an
    H100): variant 10's cluster K split at M = 5..64, also where the Hopper GEMM would start (49);
    the GEMV at M <= 4. On N <= 1024 with K >= 4096 (4096 x 1000, 8200 x 1024 on an H100):
    variant 9 in two grid rows of MT = 2 at M = 33..64, also from 49. On sm_90 the staged kernel
    takes part of both (StagedByDefault: 14336 x 500 at every M from 5, 4096 x 264 from 17,
    4096 x 1000 to 32, 8192 x 1000 at every M from 5; 8200 x 1024 is not whole stages of K) and
    serves 8192 x 2056 at M = 5..8; on the K-split layers (4096 x 264, 14336 x 500) in two grid
    rows of 32 tokens at M = 33..64 (partial at 33 / 48 / 49). PYQUANT_INT4_MID_VARIANT=nosplit:
    the choice without these rules (the GEMV to M = 8, variant 9 to 32, variant 3, the Hopper GEMM
    from 49 on sm_90); nostaged: the session-19 choice (the rules without the staged kernel)."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, 128, dtype, symmetric, True)
    sess = _session(model, env={"PYQUANT_INT4_MID_VARIANT": mid} if mid else None)
    m_list = [3, 4, 5, 7, 8, 9, 16, 17, 32, 33, 48, 49, 64, 65]
    _check_int4(sess, rng, m_list, k, n, 128, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bs", [64, 128])
@pytest.mark.parametrize("kn", [(576, 576), (1536, 576), (2048, 2048), (1000, 37)])
def test_int4_mid_above_m64(rng, dtype, bs, kn):
    """The default mid kernel above M = 64, in grid rows of 64 tokens (the tiled kernel and the
    Hopper GEMM off): partial row tiles at M = 65 / 100 / 300."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, False, True)
    env = {"PYQUANT_INT4_SM90_MIN_M": str(1 << 40), "PYQUANT_INT4_TILED_MIN_M": str(1 << 40)}
    sess = _session(model, env=env)
    _check_int4(sess, rng, [65, 100, 128, 300, 1024], k, n, bs, dtype, b, scales_t, zp, bias_t)
