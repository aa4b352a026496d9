"""MatMulInt4 on a B that the CUDA op rewrote in place in the shuffled order
(ort_ops/layout/int4_shuffled.h; matmul_int4_op.cc ShuffleInPlace; kernels in
matmul_int4_shuffled_*impl.cu and the Hopper GEMM), against the float64 reference of the
row-major codes: every M range (CUDA-core GEMV, mma.sync kernel at MT8 = 1 / 2 / 4 / 8 with
grid.y beyond, the wide shared-memory kernel, the Hopper GEMM), every kernel variant, block
sizes 64 / 128 / 256, symmetric and asymmetric (random codes and zero points over 0..15), bias,
fp16 and bf16, large activations (the GEMV's slow path), zero points and a B shared by two
nodes, and a second session on the same model. Outputs are poisoned (NaN) before each run.

PYQUANT_INT4_SHUFFLE=require makes session creation fail unless B was rewritten, so these tests
prove the path ran; they need the Hopper GEMM (sm_90a build, compute capability 9.0).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.cuda.test_cuda_int4_sm90 import _hopper_gemm_active
from tests.cuda.test_cuda_ops import _as_t, _check_int4, _int4_case, _session, run_cuda

pytestmark = pytest.mark.cuda

ALL_M = [1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 48, 64, 65, 100, 300, 1024]


@pytest.fixture(autouse=True)
def _need_hopper():
    if not _hopper_gemm_active():
        pytest.skip(
            "the op shuffles B only where the Hopper GEMM runs (sm_90a build, compute capability 9.0)"
        )


def _shuffled_session(model, **knobs: str):
    return _session(model, env={"PYQUANT_INT4_SHUFFLE": "require", **knobs})


def _variant_session(model, variant: int, **knobs: str):
    """A shuffled session pinned to kernel variant `variant` (PYQUANT_INT4_SHUF_VARIANT) at every
    M, with the Hopper GEMM off."""
    return _shuffled_session(
        model, PYQUANT_INT4_SHUF_VARIANT=str(variant), PYQUANT_INT4_SM90_MIN_M=str(1 << 40), **knobs
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bs", [64, 128, 256])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("kn", [(4096, 512), (1024, 6656), (1984, 256)])
def test_int4_shuffled_every_m(rng, dtype, bs, symmetric, kn):
    """Default dispatch; K = 1984 ends in a partial 128 / 256 block."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _shuffled_session(model)
    _check_int4(sess, rng, ALL_M, k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("variant", range(8))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_shuffled_mma_variants(rng, variant, dtype, symmetric):
    """Each mma.sync configuration at every MT8, with the Hopper GEMM off (M up to 300: grid.y)."""
    k, n, bs = 2048, 768, 64
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _variant_session(model, variant)
    _check_int4(sess, rng, [1, 3, 5, 8, 9, 16, 17, 32, 40, 64, 300], k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("x_ahead", ["0", "1", "2"])
@pytest.mark.parametrize("variant", [3, 4])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("k", [2048, 448])
def test_int4_shuffled_mma_x_ahead(rng, x_ahead, variant, dtype, symmetric, k):
    """The register kernels of variants 3 / 4 with X loaded 0, 1 or 2 k16 steps ahead
    (PYQUANT_INT4_SHUF_XAHEAD; 2 applies at MT8 <= 2, one step at larger MT8) at every MT8, Hopper
    GEMM off; K = 448 gives the warps 7 groups of 4 k16 steps: uneven, some warps none."""
    n, bs = 768, 64
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _variant_session(model, variant, PYQUANT_INT4_SHUF_XAHEAD=x_ahead)
    _check_int4(sess, rng, [2, 5, 8, 9, 16, 17, 32, 40, 64, 300], k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("variant", [8, 9])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize(
    "kn_bs",
    [
        (2048, 768, 64),  # 3 row blocks of 256 (128 with variant 9): cluster split kS = 8
        (1984, 384, 128),  # N % 256 != 0: 128-row CTAs; K ends in a partial 128 block; kS = 8
        (1024, 6656, 256),  # kS = 4 at M <= 8, 2 at M = 64, 1 at M = 300 (grid.y = 5)
    ],
)
def test_int4_shuffled_wide_variants(rng, variant, dtype, symmetric, kn_bs):
    """The wide shared-memory kernel (variants 8, 9; matmul_int4_shuffled_wide_impl.cu) at every
    MT8 (1, 2, 4, 8) with grid.y beyond 64 tokens and partial token tiles, every K split
    (kS = 1, 2, 4, 8), with the Hopper GEMM off."""
    k, n, bs = kn_bs
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _variant_session(model, variant)
    ms = [1, 3, 8, 9, 16, 17, 32, 33, 64, 65, 130, 300]
    _check_int4(sess, rng, ms, k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("variant", [40, 41, 42])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize(
    "kn_bs",
    [
        (2048, 768, 64),  # 3 wide CTAs (256 rows) / 6 tall: cluster K split
        (2304, 384, 128),  # N % 256 != 0: the second wide CTA's tiles past N zero-filled; 9 tall stages
        (1024, 6656, 256),  # 26 wide CTAs, block 256
        (1984, 256, 64),  # K % 128 != 0: no whole stages, the register mma kernel instead
    ],
)
def test_int4_shuffled_staged_variants(rng, variant, dtype, symmetric, kn_bs):
    """The staged mma kernel on the shuffled order (variants 40 / 41 / 42: automatic, wide 4 x 2,
    tall 2 x 4 warps; matmul_int4_staged_impl.cu with kShuf) at every MT8 (1, 2, 4, 8) with grid.y
    beyond 64 tokens and partial token tiles, the cluster and grid K splits its plan picks, with
    the Hopper GEMM off; pinned, it serves M = 1..4 too (by default the GEMV does)."""
    k, n, bs = kn_bs
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _variant_session(model, variant)
    ms = [1, 3, 5, 8, 9, 16, 17, 32, 33, 48, 64, 65, 130, 300]
    _check_int4(sess, rng, ms, k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_shuffled_staged_long_k_default(rng, dtype, symmetric):
    """Default dispatch on a narrow layer with long rows (matmul_int4.h Int4ShuffledStagedOverGemv):
    the GEMV at M = 1-2, the staged kernel from M = 3 (K = 8192: whole stages), every M range
    after it."""
    k, n, bs = 8192, 256, 128
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _shuffled_session(model)
    _check_int4(sess, rng, [1, 2, 3, 4, 5, 16, 33, 64, 100], k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("variant_m", [(8, 1), (8, 17), (8, 100), (40, 5), (40, 17), (40, 100)])
def test_int4_shuffled_split_deterministic(rng, variant_m):
    """The wide kernel's cluster split (variant 8, kS = 8 on this shape) and the staged kernel's
    K splits (variant 40) sum partial tiles in a fixed order: the same input gives bit-identical
    outputs run after run."""
    variant, m = variant_m
    k, n, bs, dtype = 2048, 768, 128, "float16"
    model, *_ = _int4_case(rng, k, n, bs, dtype, False, True)
    sess = _variant_session(model, variant)
    x = _as_t(rng.standard_normal((m, k)), dtype)
    first = run_cuda(sess, x, n, dtype)
    for _ in range(5):
        assert np.array_equal(run_cuda(sess, x, n, dtype), first)


@pytest.mark.parametrize("variant", [10, 11, 12, 13, 14, 15, 18, 20, 22, 26, 28])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_shuffled_gemv_variants(rng, variant, dtype, symmetric):
    """Each CUDA-core GEMV configuration at M = 1..4 (M = 5 goes to the mma kernel); K = 4160
    leaves the threads uneven piece counts (65 units of 64 k; chunk mode, 26 / 28: one unit per
    chunk, scales loaded with it)."""
    k, n, bs = 4160, 384, 64
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _shuffled_session(model, PYQUANT_INT4_SHUF_VARIANT=str(variant))
    _check_int4(sess, rng, [1, 2, 3, 4, 5], k, n, bs, dtype, b, scales_t, zp, bias_t)


# (K, N, block size) for the piece kernel's configurations, one per variant (cycled): uneven and
# empty warps (K = 448: 7 units of 64 k; K = 1984: 31), N / 16 CTAs with 1 or 2 tiles each, block
# sizes 64 / 128 / 256 (a unit of 64 k always lies in one block).
_PIECE_SHAPES = [(2048, 768, 64), (1984, 384, 128), (1024, 6656, 256), (448, 256, 64)]


@pytest.mark.parametrize("paired", ["0", "1"])
@pytest.mark.parametrize("variant", range(60, 69))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_shuffled_piece_variants(rng, paired, variant, dtype, symmetric):
    """The piece mma kernel (matmul_int4_shuffled_piece_impl.cu), every configuration (60..67) and
    the automatic one (68), with the MMAs as by default or regrouped so that X needs no moves
    (PYQUANT_INT4_PIECE_PAIRED=1), at M = 1..8 (one token tile), 9..16 (two) and beyond (grid.y),
    with the Hopper GEMM off; configurations 1 / 2 (61, 62) run 17-32 tokens as four token tiles
    in one grid row (MT8 = 4), the others as two grid rows; configuration 1 runs M > 32 in grid
    rows of 48 tokens (MT8 = 6: 40, 48, 65, 96, 130) or 64 (MT8 = 8 where 48 would need more rows:
    49, 64, 100; a 65th token alone in its row at 100)."""
    k, n, bs = _PIECE_SHAPES[variant % len(_PIECE_SHAPES)]
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _variant_session(model, variant, PYQUANT_INT4_PIECE_PAIRED=paired)
    ms = [1, 2, 3, 5, 8, 9, 16, 17, 25, 32, 40, 48, 49, 64, 65, 96, 100, 130]
    _check_int4(sess, rng, ms, k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("bs", [64, 128])
def test_int4_shuffled_default_4096_square(rng, dtype, symmetric, bs):
    """4096 x 4096 with no knobs (shuffled by default since session 45: Int4ShuffleByDefault):
    the piece kernel at M <= 16 (two token tiles), 17-32 (four, PieceMt4Config) and 33-64 (six
    to 48, eight above: kInt4PieceWideConfig), the Hopper GEMM from M = 65 (the ping-pong 128 / 192
    tiles at 96-192)."""
    k = n = 4096
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _session(model)
    ms = [1, 3, 8, 16, 17, 24, 32, 33, 48, 49, 64, 65, 96, 160, 256]
    _check_int4(sess, rng, ms, k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_shuffled_gemv_default_long_k(rng, dtype, symmetric):
    """The default GEMV (matmul_int4.h Int4ShuffledGemvDefaultConfig: 512 threads at M = 1, 256 at
    M = 2 on these 24 CTAs), and the mma kernel after it; K = 8256 is uneven across the GEMV's
    threads, and 512 threads leave most of them without a unit."""
    k, n, bs = 8256, 384, 64
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _shuffled_session(model)
    _check_int4(sess, rng, [1, 2, 5], k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("variant", ["-1", "13", "60", "68"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_int4_shuffled_large_activations(rng, variant, dtype):
    """|X| = 4000 with small scales: the GEMV's unscaled fp16 chains overflow, so its slow path
    must give the finite true sums (the mma kernels, the piece kernel included, sum in fp32 and
    never had the problem)."""
    from pyquant import layout
    from pyquant.reference import assert_within_limit, matmul_int4_ref
    from tests.ops.graphs import int4_model

    k, n, bs = 2048, 256, 128
    nb = layout.n_blocks(k, bs)
    b = rng.integers(0, 256, size=(n, nb, bs // 2), dtype=np.uint8)
    zp = layout.pack_zero_points(rng.integers(0, 16, size=(n, nb), dtype=np.uint8))
    scales = (0.004 + 0.002 * rng.random((n, nb))).astype(np.float32)
    model = int4_model(b, scales, k, n, bs, dtype=dtype, zero_points=zp)
    sess = _shuffled_session(model, PYQUANT_INT4_SHUF_VARIANT=variant)
    scales_t = _as_t(scales, dtype)
    for m in [1, 2, 4, 8]:
        x = _as_t(4000.0 * np.sign(rng.standard_normal((m, k))), dtype)
        y = run_cuda(sess, x, n, dtype)
        y_ref, mag = matmul_int4_ref(x, b, scales_t, k, n, bs, zp)
        assert np.isfinite(y).all()
        assert_within_limit(y, y_ref, mag, dtype)


def test_int4_shuffled_shared_b_and_second_session(rng):
    """Two nodes on one B initializer: it is rewritten once and both read it right; a second
    session of the same model (fresh initializers) is right too, also after the first is gone."""
    import onnx
    from onnx import helper

    from pyquant.reference import assert_within_limit, matmul_int4_ref

    k, n, bs, dtype = 1024, 384, 128, "float16"
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, True, False)
    g = model.graph
    node = g.node[0]
    twin = onnx.NodeProto()
    twin.CopyFrom(node)
    twin.name = node.name + "_twin"
    twin.output[0] = "Y2"
    g.node.append(twin)
    g.output.append(helper.make_tensor_value_info("Y2", g.output[0].type.tensor_type.elem_type, None))
    sessions = [_shuffled_session(model) for _ in range(2)]
    x = _as_t(rng.standard_normal((3, k)), dtype)
    y_ref, mag = matmul_int4_ref(x, b, scales_t, k, n, bs)
    for sess in sessions:
        for y in sess.run(None, {"X": x.astype(np.float16)}):
            assert_within_limit(np.asarray(y, dtype=np.float64), y_ref, mag, dtype)
    del sessions[0]
    third = _shuffled_session(model)
    for sess in (sessions[0], third):
        for y in sess.run(None, {"X": x.astype(np.float16)}):
            assert_within_limit(np.asarray(y, dtype=np.float64), y_ref, mag, dtype)


def test_int4_shuffle_require_reports_why(rng):
    """A shape the order does not tile keeps B row-major; =require says so at session creation."""
    model, *_ = _int4_case(rng, 1024, 520, 128, "float16", True, False)
    with pytest.raises(Exception, match="stays row-major: N % 128"):
        _shuffled_session(model)


def test_int4_shuffle_off_matches(rng):
    """PYQUANT_INT4_SHUFFLE=0 (row-major B, the portable small-M kernels) and the default agree
    within the limit on the same inputs."""
    k, n, bs, dtype = 4096, 512, 128, "float16"
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, False, True)
    plain = _session(model, env={"PYQUANT_INT4_SHUFFLE": "0"})
    shuffled = _shuffled_session(model)
    for m in [1, 16, 200]:
        x = _as_t(rng.standard_normal((m, k)), dtype)
        y0, y1 = run_cuda(plain, x, n, dtype), run_cuda(shuffled, x, n, dtype)
        assert np.abs(y0 - y1).max() <= 2e-2 * np.abs(y0).max()
