"""LinearFp8's CUDA dispatch paths (ort_ops/cuda/linear_fp8_impl.cu) against the float64 reference
of pyquant.reference with docs/ops.md's error limit:

* activation quantizers: the 512-thread-per-row kernel (M <= 16), the warp-per-row kernel (M > 16),
  rows held in registers (K <= 4096 for fp16) or read twice (longer K), and the scalar kernel for
  rows that are not 16-byte multiples (K = 100 with fp16 -> 200 bytes);
* the fused decode GEMV (linear_fp8_gemv_impl.cu: quantization inside the GEMV, CUDA cores) for
  M = 1, 2 (the default there; M <= 4 when pinned) and its variants (PYQUANT_FP8_GEMV=fused ..
  fused4), every weight-scale layout (per channel, per-K-block 16 / 128), static and dynamic
  activation scales;
* the small-M mma.sync kernel: M <= 8 (kLow8 variant) and 9..16 (PYQUANT_FP8_GEMV=mma pins it for
  M <= 4 too); the staged kernel (linear_fp8_staged_impl.cu), the default on sm_90's narrow layers
  at M = 3..256 (grid rows of 64 tokens above 64) and pinned below the Hopper GEMM
  (PYQUANT_FP8_GEMV=staged);
* the Hopper CUTLASS FP8 GEMM (sm90/fp8_gemm_sm90.cu) for M > 16, per-channel scales, fp16 / bf16:
  M = 17, 64 (narrow tile), 65, 255, 256 (wide tile), 4097; N a multiple of 8 but not of 128;
  K = 16 * odd; static and dynamic activation scales; with and without bias; also forced down to
  M = 1 (PYQUANT_FP8_SM90_MIN_M=1) and compared with the portable kernels;
* per-K-block weight scales (portable kernel at every M);
* benchmark-selectable variants (environment variables read at kernel creation, docs in
  ort_ops/cuda/linear_fp8.h): the swapped-operand M <= 8 kernel (PYQUANT_FP8_GEMV=swap; FP8
  mma.sync on sm_89+, fp16 mma.sync before), the sm90 GEMM variants (PYQUANT_FP8_SM90_TILE:
  FastAccum 128x128 / 128x256, 2x1 clusters, promoting ping-pong 64x128 / 64x64) and scheduler
  knobs (split-K, data-parallel, stream-K, raster order, swizzle, promotion interval, unordered
  reduction); the promoting mainloops on one-signed data (the worst case for the tensor core's
  truncating accumulation).

On a GPU other than compute capability 9.0, or a build without the sm90 kernels, the same cases
run the portable kernels and must pass the same checks. Outputs are poisoned (NaN) before each
run (run_cuda).
"""

from __future__ import annotations

import numpy as np
import pytest

from pyquant._cuda_knobs import FP8_SM90_TILES
from tests.cuda.test_cuda_ops import _as_t, _check_fp8, _check_fp8_specials, _fp8_case, _session, run_cuda

pytestmark = pytest.mark.cuda

GEMV_M = [1, 2, 7, 8, 9, 15, 16]
SM90_M = [17, 64, 65, 255, 256]


def _fp8_session(model, min_m: int | None = None, env: dict | None = None):
    """Session whose LinearFp8 kernels read PYQUANT_FP8_SM90_MIN_M = min_m (and `env`) at creation."""
    env = dict(env or {})
    if min_m is not None:
        env["PYQUANT_FP8_SM90_MIN_M"] = str(min_m)
    return _session(model, env=env)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 128])
@pytest.mark.parametrize("x_scale", [None, 0.02])
@pytest.mark.parametrize("kn", [(4096, 200), (1008, 264), (16400, 40), (100, 24)])
def test_fp8_gemv_paths(rng, dtype, block_size, x_scale, kn):
    """M <= 16: the fused GEMV (M <= 4), the small-M kernel (both variants) after the 512-thread
    quantizer; K = 16400 needs more than 4 vectors per thread (the two-pass branch, every dtype); K = 100: the
    scalar quantizer and the reference GEMM."""
    k, n = kn
    with_bias = bool(rng.integers(0, 2))
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, x_scale, with_bias)
    sess = _fp8_session(model)
    _check_fp8(sess, rng, GEMV_M, k, n, dtype, w8, ws, block_size, x_scale, bias_t)


@pytest.mark.parametrize("gemv", ["mma", "fused", "fused1", "fused2", "fused3", "fused4", "fused5", "fused6"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 16, 128])
@pytest.mark.parametrize("x_scale", [None, 0.02])
@pytest.mark.parametrize("kn", [(4096, 200), (1008, 37), (16400, 40), (48, 3)])
def test_fp8_gemv_fused(rng, gemv, dtype, block_size, x_scale, kn):
    """M = 1..5 under each pinned small-M choice: the fused GEMV's variants (rows per CTA 2 / 4 /
    8, 128 / 256 threads) with N not a multiple of the rows per CTA (clamped rows), K = 16 * odd,
    fewer 16-byte pieces than threads (K = 48), per-K-block scales of 16 (one piece per block,
    which the mma.sync kernel cannot take: reference kernel there); M = 5 leaves the fused GEMV.
    fused5 / fused6: the chunk kernel at M = 1 with per-channel scales (4 rows x 2 pieces x 128
    threads / 8 rows x 256 threads per chunk: K = 4096 one chunk, K = 16400 several with a partial
    one and the separate amax pass, K = 1008 / 48 one partial chunk, N = 3 fewer rows than a CTA's),
    variant 0 elsewhere."""
    k, n = kn
    with_bias = bool(rng.integers(0, 2))
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, x_scale, with_bias)
    sess = _fp8_session(model, env={"PYQUANT_FP8_GEMV": gemv})
    _check_fp8(sess, rng, [1, 2, 3, 4, 5], k, n, dtype, w8, ws, block_size, x_scale, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("x_scale", [None, 0.02])
@pytest.mark.parametrize("kn", [(4096, 8192), (8192, 4096)])
def test_fp8_gemv_chunk_default(rng, dtype, x_scale, kn):
    """The default ("auto") at M = 1 on layers of 2^25 weights: the chunk kernel, variant 5 for K <=
    4096 and 6 above (Fp8GemvAutoVariant); M = 2 keeps variant 2."""
    k, n = kn
    model, w8, ws, bias_t = _fp8_case(rng, k, n, 0, dtype, x_scale, True)
    sess = _fp8_session(model)
    _check_fp8(sess, rng, [1, 2], k, n, dtype, w8, ws, 0, x_scale, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 128])
@pytest.mark.parametrize("x_scale", [None, 0.02])
@pytest.mark.parametrize("kn", [(4096, 200), (16400, 40), (8192, 520), (1008, 37)])
def test_fp8_mma_k_split(rng, dtype, block_size, x_scale, kn):
    """PYQUANT_FP8_GEMV=mmasplit: the small-M mma.sync kernel in sm_90 clusters of CTAs that split K
    (ClusterKSplitFor on an H100: kS = 8 / 8 / 4 / 4; K = 1008 leaves one 64-wide chunk per warp),
    at M = 1 ... 8 (kLow8), 9 ... 16 and, with the Hopper GEMM off, 17 ... 32 (two m16 tiles)."""
    k, n = kn
    with_bias = bool(rng.integers(0, 2))
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, x_scale, with_bias)
    sess = _fp8_session(model, min_m=1 << 40, env={"PYQUANT_FP8_GEMV": "mmasplit"})
    _check_fp8(sess, rng, [1, 3, 8, 9, 16, 17, 32], k, n, dtype, w8, ws, block_size, x_scale, bias_t)


@pytest.mark.parametrize("nt", ["2", "4"])
@pytest.mark.parametrize("gemv", ["mma", "mmasplit"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 128])
@pytest.mark.parametrize("kn", [(4096, 1000), (16400, 40), (1008, 264), (64, 12)])
def test_fp8_mma_column_tiles(rng, nt, gemv, dtype, block_size, kn):
    """PYQUANT_FP8_MMA_NT=2 / 4: at M > 16 each warp of the mma kernel computes 2 / 4 column tiles
    (partial ones at N = 1000 / 40 / 12), without and with the cluster K split, Hopper GEMM off."""
    k, n = kn
    with_bias = bool(rng.integers(0, 2))
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, None, with_bias)
    sess = _fp8_session(model, min_m=1 << 40, env={"PYQUANT_FP8_GEMV": gemv, "PYQUANT_FP8_MMA_NT": nt})
    _check_fp8(sess, rng, [16, 17, 32, 33, 40, 64], k, n, dtype, w8, ws, block_size, None, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 64, 256])
@pytest.mark.parametrize("x_scale", [None, 0.02])
@pytest.mark.parametrize(
    "kn", [(4096, 1000), (14336, 264), (2048, 1032), (1024, 4096), (512, 24), (1008, 40)]
)
def test_fp8_staged(rng, dtype, block_size, x_scale, kn):
    """PYQUANT_FP8_GEMV=staged, Hopper GEMM off: the staged kernel (linear_fp8_staged_impl.cu) at
    M = 1 .. 64 (8 / 16 / 32 / 64 tokens per CTA, partial ones), N not a multiple of its 128 / 64
    channels (nor of 16: 1000, 264, 1032, 24, 40), K split over clusters of 1 .. 8 on an H100
    (14336 x 264: 8; 1024 x 4096: none), per-channel and per-block scales; K = 1008 is no whole
    number of its stages: the mma kernel serves it."""
    k, n = kn
    with_bias = bool(rng.integers(0, 2))
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, x_scale, with_bias)
    sess = _fp8_session(model, min_m=1 << 40, env={"PYQUANT_FP8_GEMV": "staged"})
    m_list = [1, 2, 5, 8, 9, 16, 17, 31, 33, 48, 64]
    _check_fp8(sess, rng, m_list, k, n, dtype, w8, ws, block_size, x_scale, bias_t)


@pytest.mark.parametrize("shape", ["tall", "wide"])
@pytest.mark.parametrize("block_size", [0, 128])
@pytest.mark.parametrize("kn", [(14336, 1000), (4096, 520), (1024, 4096), (640, 40)])
def test_fp8_staged_shape(rng, shape, block_size, kn):
    """PYQUANT_FP8_STAGED_SHAPE=tall / wide: the staged kernel's CTA shape pinned (64 channels x
    256 K per stage / 128 x 128) at every M it takes, by default on narrow layers and pinned
    (PYQUANT_FP8_GEMV=staged) on the others; K = 640 is no whole number of tall stages: wide."""
    k, n = kn
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, "float16", None, True)
    env = {"PYQUANT_FP8_STAGED_SHAPE": shape}
    if n > 1024:
        env["PYQUANT_FP8_GEMV"] = "staged"
    sess = _fp8_session(model, min_m=65, env=env)
    _check_fp8(sess, rng, [2, 3, 9, 17, 33, 64], k, n, "float16", w8, ws, block_size, None, bias_t)


@pytest.mark.parametrize("gemv", [None, "staged"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 128])
@pytest.mark.parametrize("kn", [(14336, 1000), (8192, 264), (4096, 40)])
def test_fp8_staged_cluster16(rng, gemv, dtype, block_size, kn):
    """PYQUANT_STAGED_MAX_CLUSTER=16: the staged kernel's K split in clusters of up to 16 CTAs
    (sm_90's non-portable size), by default (narrow layers, M = 3..64) and pinned; on an H100
    14336 x 1000 splits 16 ways at M = 33..64 (8 wide CTAs), 8 ways where fewer stages per rank
    would remain. Other GPUs: no split, same checks."""
    k, n = kn
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, None, True)
    env = {"PYQUANT_STAGED_MAX_CLUSTER": "16"}
    if gemv:
        env["PYQUANT_FP8_GEMV"] = gemv
    sess = _fp8_session(model, min_m=65, env=env)
    _check_fp8(sess, rng, [1, 5, 9, 17, 33, 40, 64], k, n, dtype, w8, ws, block_size, None, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("x_scale", [None, 0.02])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("kn", [(4096, 520), (1008, 264), (48, 200), (6160, 8)])
def test_fp8_sm90_shapes(rng, dtype, x_scale, with_bias, kn):
    """M > 16, per-channel: the Hopper GEMM on sm_90 (the warp-per-row quantizer in front) from
    M = 17, or from M = 65 on narrow layers where the mma.sync kernel below splits K (all of these
    but K = 48; N = 520: from 33); data-parallel tiles up to M = 256 (decomposition "auto")."""
    k, n = kn
    model, w8, ws, bias_t = _fp8_case(rng, k, n, 0, dtype, x_scale, with_bias)
    sess = _fp8_session(model)
    _check_fp8(sess, rng, SM90_M, k, n, dtype, w8, ws, 0, x_scale, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 128])
@pytest.mark.parametrize("gemv", [None, "nostaged", "mma"])
@pytest.mark.parametrize("kn", [(4096, 200), (16400, 40), (8192, 1000), (4096, 1000), (1008, 264)])
def test_fp8_default_narrow(rng, dtype, block_size, gemv, kn):
    """The default on narrow layers (the mma kernel's ceil(N / 8) CTAs leave SMs idle) on sm_90: the
    fused GEMV at M <= 2 (M = 1 where K >= 8192), the staged kernel at M = 3..64 (2..64 where
    K >= 8192; the mma.sync kernel with its cluster K split at M = 3, 4 before session 22;
    4096 x 1000: to 32, then the Hopper GEMM; K = 1008, no whole number of its stages: the mma
    kernel), the Hopper GEMM (per-channel) from 65. "nostaged": the session-20 default (the mma
    kernel to 64, the GEMM from 33 on N = 1000); "mma": no split, the GEMM from M = 17 (the choice
    before session 18). Other GPUs: the portable kernels, same checks."""
    k, n = kn
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, None, True)
    sess = _fp8_session(model, env={"PYQUANT_FP8_GEMV": gemv} if gemv else None)
    m_list = [1, 2, 3, 4, 5, 8, 16, 17, 32, 33, 48, 64, 65]
    _check_fp8(sess, rng, m_list, k, n, dtype, w8, ws, block_size, None, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 128])
@pytest.mark.parametrize(
    "env", [None, {"PYQUANT_FP8_GEMV": "staged", "PYQUANT_FP8_SM90_MIN_M": str(1 << 40)}]
)
@pytest.mark.parametrize("kn", [(14336, 264), (8192, 1000), (4096, 1000), (4096, 40)])
def test_fp8_narrow_above_64(rng, dtype, block_size, env, kn):
    """Narrow layers at M = 65..257 (session 23), by default on sm_90: with K >= 8192 and per-channel
    scales (14336 x 264, 8192 x 1000) the Hopper GEMM's 128 x 64 tile split 4 ways along K up to
    M = 256; else the staged kernel in two grid rows of 64 tokens up to M = 128 where
    ceil(N / 8) <= SMs / 2 (4096 x 40, 14336 x 264 per-block; the second row partial at 65 / 96); else
    the Hopper GEMM's default tiles or, per-block, the mma kernel (4096 x 1000). Pinned (the staged
    kernel wherever it fits, Hopper GEMM off; partial rows at 129 / 200 / 255 too) on all four.
    Other GPUs: the portable kernels."""
    k, n = kn
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, None, True)
    sess = _fp8_session(model, env=env)
    _check_fp8(
        sess, rng, [65, 96, 128, 129, 200, 255, 256, 257], k, n, dtype, w8, ws, block_size, None, bias_t
    )


# The GEMM launch knob of linear_fp8.h: by default the Hopper GEMM follows the quantizer under PDL
# at every M (the quantizer's late trigger above M = 512); "upto512": not PDL-launched above 512.
GEMM_PDL_ENVS = [{}, {"PYQUANT_FP8_GEMM_PDL": "upto512"}]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block_size", [0, 128])
@pytest.mark.parametrize("env", GEMM_PDL_ENVS, ids=lambda e: "-".join(e.values()) or "default")
def test_fp8_large_m(rng, dtype, block_size, env):
    """M = 4097: many waves of output tiles (sm90) / of the portable kernel (block scales); 1535 /
    1536 / 2000: either side of the 128x128 -> 128x192 tile switch, partial token tiles; the GEMM
    after the quantizer's late PDL trigger (default) and without PDL above M = 512."""
    k, n = 1024, 264
    model, w8, ws, bias_t = _fp8_case(rng, k, n, block_size, dtype, None, True)
    sess = _fp8_session(model, env=env)
    _check_fp8(sess, rng, [1535, 1536, 2000, 4097], k, n, dtype, w8, ws, block_size, None, bias_t)


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
@pytest.mark.parametrize("k", [512, 8200])
def test_fp8_quantizer_specials(rng, dtype, m, k):
    """NaN row, all-zero row, an infinite element (row -> NaN), saturation under a static scale,
    through both vectorized quantizers (a CTA per row for M <= 16 or rows over 4096 fp16 / bf16
    elements, else a warp per row) and the GEMV / GEMM behind them."""
    _check_fp8_specials(_fp8_session, rng, m, k, 64, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("x_scale", [None, 0.02])
@pytest.mark.parametrize("kn", [(4096, 200), (1008, 264), (16400, 40), (48, 24), (80, 8), (4112, 4104)])
def test_fp8_gemv_swap(rng, dtype, x_scale, kn):
    """PYQUANT_FP8_GEMV=swap, M <= 8: W rows in the MMA's m16 slot; N not a multiple of 16 (the
    clamped channel rows), K = 16 * odd (a partial 64-wide chunk), fewer chunks than warps (K = 48);
    M = 9..16 and per-block scales keep fp8_mma_kernel."""
    k, n = kn
    with_bias = bool(rng.integers(0, 2))
    model, w8, ws, bias_t = _fp8_case(rng, k, n, 0, dtype, x_scale, with_bias)
    sess = _fp8_session(model, env={"PYQUANT_FP8_GEMV": "swap"})
    _check_fp8(sess, rng, [1, 2, 3, 5, 8, 9], k, n, dtype, w8, ws, 0, x_scale, bias_t)
    if kn == (1008, 264):
        model, w8, ws, bias_t = _fp8_case(rng, k, n, 128, dtype, x_scale, with_bias)
        sess = _fp8_session(model, env={"PYQUANT_FP8_GEMV": "swap"})
        _check_fp8(sess, rng, [1, 8], k, n, dtype, w8, ws, 128, x_scale, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("tile", FP8_SM90_TILES)
@pytest.mark.parametrize("kn", [(4096, 520), (1008, 264), (6160, 8)])
def test_fp8_sm90_tile_variants(rng, dtype, tile, kn):
    """PYQUANT_FP8_SM90_TILE variants (fp16 output; bf16 keeps the default tiles): partial tiles
    in both extents, an odd number of channel tiles under a 2x1 cluster (N = 264: 3 tiles)."""
    k, n = kn
    model, w8, ws, bias_t = _fp8_case(rng, k, n, 0, dtype, None, True)
    sess = _fp8_session(model, env={"PYQUANT_FP8_SM90_TILE": tile})
    _check_fp8(sess, rng, [17, 64, 129, 300, 1030], k, n, dtype, w8, ws, 0, None, bias_t)


KNOBS = [
    {"PYQUANT_FP8_SM90_DECOMP": "heuristic"},
    {"PYQUANT_FP8_SM90_DECOMP": "splitk", "PYQUANT_FP8_SM90_SPLITS": "4"},
    {"PYQUANT_FP8_SM90_DECOMP": "splitk", "PYQUANT_FP8_SM90_SPLITS": "3"},
    {"PYQUANT_FP8_SM90_DECOMP": "dp"},
    {"PYQUANT_FP8_SM90_DECOMP": "streamk"},
    {"PYQUANT_FP8_SM90_RASTER": "m", "PYQUANT_FP8_SM90_SWIZZLE": "2"},
    {"PYQUANT_FP8_SM90_RASTER": "n", "PYQUANT_FP8_SM90_SWIZZLE": "4"},
    {"PYQUANT_FP8_SM90_PROMOTE": "8"},
    {"PYQUANT_FP8_SM90_REDUCE": "nondet"},
    {"PYQUANT_FP8_SM90_TILE": "f256", "PYQUANT_FP8_SM90_DECOMP": "splitk", "PYQUANT_FP8_SM90_SPLITS": "2"},
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "knobs", KNOBS, ids=lambda d: "-".join(f"{k.split('_')[-1]}={v}" for k, v in d.items())
)
def test_fp8_sm90_scheduler_knobs(rng, dtype, knobs):
    """Runtime arguments of the same kernels: decomposition, splits, raster order, swizzle,
    promotion interval, reduction order. K = 16 * odd so splits do not divide the k-blocks."""
    k, n = 4112, 264
    model, w8, ws, bias_t = _fp8_case(rng, k, n, 0, dtype, 0.02, True)
    sess = _fp8_session(model, env=knobs)
    _check_fp8(sess, rng, [17, 64, 256, 700], k, n, dtype, w8, ws, 0, 0.02, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "env",
    [
        {},
        {"PYQUANT_FP8_GEMV": "swap"},
        {"PYQUANT_FP8_SM90_MIN_M": "1"},
        {"PYQUANT_FP8_SM90_MIN_M": "1", "PYQUANT_FP8_SM90_TILE": "p128"},
        {"PYQUANT_FP8_SM90_MIN_M": "1", "PYQUANT_FP8_SM90_TILE": "p64"},
        {"PYQUANT_FP8_SM90_MIN_M": "1", "PYQUANT_FP8_SM90_TILE": "o128"},
        {"PYQUANT_FP8_SM90_MIN_M": "1", "PYQUANT_FP8_SM90_TILE": "o256"},
    ],
    ids=["default", "swap", "sm90all", "pingpong128", "pingpong64", "overlap128", "overlap256"],
)
def test_fp8_one_signed_error(rng, dtype, env):
    """All-positive X and W, K = 8192: the tensor core's truncation errors do not cancel, so this
    is the worst case for reduced-precision accumulation (promoting mainloop every 4 MMAs;
    the swap kernel's FP8 MMAs each start from zero). Must stay within the error limit."""
    from pyquant import layout
    from pyquant.ops_spec import FP8_OP
    from pyquant.reference import assert_within_limit, linear_fp8_ref
    from tests.ops.graphs import fp8_model

    k, n = 8192, 256
    w = np.abs(rng.standard_normal((n, k))).astype(np.float32) + 0.1
    w8, ws = layout.quantize_weight_fp8(w, 0)
    model = fp8_model(w8, ws, dtype=dtype, block_size=0, x_scale=None, bias=None)
    sess = _fp8_session(model, env=env)
    for m in [1, 8, 64, 200, 512, 1600, 2100]:
        x = _as_t(np.abs(rng.standard_normal((m, k))) + 0.1, dtype)
        y = run_cuda(sess, x, n, dtype)
        y_ref, mag = linear_fp8_ref(x, w8, ws, 0, None, None)
        assert_within_limit(y, y_ref, mag, dtype, op=FP8_OP)
