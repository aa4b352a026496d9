"""MatMulInt4's Hopper path (ort_ops/cuda/sm90/int4_gemm_sm90.cu: CUTLASS mixed-input wgmma GEMM
with stream-K) against the float64 reference, on the shapes that walk its tile configurations and
edges: M across the narrow (<= 64) / wide / mid (ping-pong) tiles and partial tiles, N a
multiple of 8 but not of the 128-row tile, K with a partial last block, block sizes 64 / 128 /
256, symmetric and asymmetric (random codes and zero points over 0..15), with and without bias,
fp16 and bf16.

On a GPU other than compute capability 9.0 (or a build without the sm90 kernels) these run the
portable kernels, which must pass the same checks. Outputs are poisoned (NaN) before each run.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.cuda.test_cuda_ops import _as_t, _check_int4, _int4_case, _session, run_cuda

pytestmark = pytest.mark.cuda

SM90_M = [17, 64, 65, 128, 255, 256, 4097]


def _sm90_session(model, min_m: int | None = 17, env: dict | None = None):
    """Session with the Hopper GEMM from M = min_m on (default 17, also on layers whose default
    starts it higher); None: the op's default. env: more knobs, as in _session."""
    env = dict(env or {})
    if min_m is not None:
        env["PYQUANT_INT4_SM90_MIN_M"] = str(min_m)
    return _session(model, env=env)


def _hopper_gemm_active() -> bool:
    """The library has the sm_90a kernels and the GPU is compute capability 9.0."""
    import pyquant

    if not pyquant.build_info().get("sm90_kernels"):
        return False
    try:
        import torch
    except ImportError:
        return True  # cannot tell: let the checks speak
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bs", [64, 128, 256])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("kn", [(4096, 520), (1000, 264), (2048, 200)])
def test_int4_sm90_shapes(rng, dtype, bs, symmetric, kn):
    k, n = kn
    with_bias = bool(rng.integers(0, 2))
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, with_bias)
    sess = _sm90_session(model)
    _check_int4(sess, rng, SM90_M, k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bs", [64, 128])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_sm90_mid_tile(rng, dtype, bs, symmetric):
    """The 64 x 256 ping-pong tile (128 < M <= 512 on layers wide enough to fill the GPU with it):
    N = 6664 is 104 full 64-channel tiles plus a partial one, K = 1984 ends in a partial 128-block,
    M = 129 / 300 leave partial 256-token tiles; M = 100 stays on the Wide tile, M = 513 on Huge."""
    k, n = 1984, 6664
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _sm90_session(model)
    _check_int4(sess, rng, [100, 129, 300, 512, 513], k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_int4_sm90_from_m1(rng, dtype):
    """The Hopper GEMM forced down to M = 1 (PYQUANT_INT4_SM90_MIN_M=1): partial tiles everywhere."""
    k, n, bs = 512, 136, 128
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, False, True)
    sess = _sm90_session(model, min_m=1)
    _check_int4(sess, rng, [1, 2, 3, 8, 16, 33], k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bs", [64, 128])
@pytest.mark.parametrize("kn", [(576, 576), (1536, 576), (576, 192)])
def test_int4_small_layer_default_dispatch(rng, dtype, bs, kn):
    """SmolLM2's small layers on the op's default dispatch: the mid kernel in rows of 64 tokens while
    its grid fits one wave (M = 49 .. 300 here), then the Hopper GEMM, data-parallel where its K loop
    is short and its tiles fit one wave. K = 576 ends in a partial 128-block."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, False, True)
    sess = _sm90_session(model, min_m=None)
    _check_int4(sess, rng, [1, 8, 49, 64, 65, 128, 300, 1024], k, n, bs, dtype, b, scales_t, zp, bias_t)
    x = _as_t(rng.standard_normal((128, k)), dtype)
    y0 = run_cuda(sess, x, n, dtype)
    np.testing.assert_array_equal(run_cuda(sess, x, n, dtype), y0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_int4_sm90_deterministic(rng, dtype):
    """Stream-K reduces partial tiles in a fixed order: the same input gives the same bits."""
    if not _hopper_gemm_active():
        pytest.skip(
            "no Hopper GEMM here: the portable tiled kernel sums its split-K partials with fp32 "
            "atomics (matmul_int4_tiled_impl.cu), not bit-reproducible run to run"
        )
    k, n, bs = 4096, 512, 128
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, True, True)
    sess = _sm90_session(model)
    for m in [64, 300]:
        x = _as_t(rng.standard_normal((m, k)), dtype)
        y0 = run_cuda(sess, x, n, dtype)
        for _ in range(3):
            np.testing.assert_array_equal(run_cuda(sess, x, n, dtype), y0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_int4_sm90_special_scales_fall_back(rng, dtype):
    """A scale the Hopper path cannot honour exactly (inf: its -zp * s + q * s would give NaN where
    (q - zp) * s gives +-inf) makes the node keep the portable kernels: IEEE results as documented."""
    from pyquant.reference import assert_within_limit, matmul_int4_ref
    from tests.ops.graphs import int4_model

    k, n, bs = 256, 64, 64
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, True, False)
    scales_t = scales_t.copy()
    scales_t[3, 1] = np.inf
    model = int4_model(b, scales_t.astype(np.float32), k, n, bs, dtype=dtype)
    sess = _sm90_session(model)
    for m in [17, 100]:
        x = _as_t(rng.standard_normal((m, k)), dtype)
        y = run_cuda(sess, x, n, dtype)
        y_ref, mag = matmul_int4_ref(x, b, scales_t, k, n, bs)
        assert_within_limit(y, y_ref, mag, dtype)


def test_int4_sm90_matches_portable_kernels(rng):
    """Both paths within the limit of the reference, and close to each other."""
    k, n, bs, dtype = 4096, 264, 128, "float16"
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, False, True)
    fast = _sm90_session(model)
    portable = _sm90_session(model, min_m=1 << 40)
    x = _as_t(rng.standard_normal((200, k)), dtype)
    y_fast, y_port = run_cuda(fast, x, n, dtype), run_cuda(portable, x, n, dtype)
    scale = np.abs(y_port).max()
    assert np.abs(y_fast - y_port).max() <= 2e-2 * scale
    _check_int4(fast, rng, [200], k, n, bs, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("tile", ["c1", "c2m", "k128", "p128", "p256", "p64", "w192", "p192"])
@pytest.mark.parametrize("bs", [64, 128])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("kn", [(4096, 520), (2000, 264)])
def test_int4_sm90_tile_variants(rng, tile, bs, symmetric, kn):
    """The benchmark variants of the Hopper GEMM (PYQUANT_INT4_SM90_TILE,
    int4_gemm_sm90_variants.cu: 1x1 / 1x2 clusters, K tile 128, the ping-pong tiles), fp16, at
    every M of the Hopper path: odd tile counts for the clusters and the 64-channel ping-pong tiles
    (N = 520, 264; M = 17, 100, 513, 777), a partial last K block (K = 2000); block 64 with the
    128-wide K tile is not implementable there and must fall back to the default tiles."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, "float16", symmetric, True)
    sess = _sm90_session(model, env={"PYQUANT_INT4_SM90_TILE": tile})
    _check_int4(sess, rng, [17, 100, 513, 777, 1024], k, n, bs, "float16", b, scales_t, zp, bias_t)


@pytest.mark.parametrize("tile", ["p128", "w192", "p192"])
@pytest.mark.parametrize("bs", [64, 128])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("kn", [(4096, 512), (1024, 6656)])
def test_int4_sm90_tiles_shuffled(rng, tile, bs, symmetric, kn):
    """The tile variants that also read B in the shuffled order (int4_gemm_sm90_shuffled.cu,
    WithShuffledType: the 64 x 128 ping-pong tiles "p128", 192 tokens per tile "w192" / "p192"),
    fp16: every M of the Hopper path (M = 193, 300, 513: more than one token tile); both layers
    tile the copy (N % 128 == 0, K % 64 == 0), so B is read in the shuffled order."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, "float16", symmetric, True)
    env = {"PYQUANT_INT4_SM90_TILE": tile, "PYQUANT_INT4_SHUFFLE": "require"}
    sess = _sm90_session(model, env=env)
    _check_int4(sess, rng, [1, 17, 65, 100, 192, 193, 300, 513], k, n, bs, "float16", b, scales_t, zp, bias_t)


@pytest.mark.parametrize("tile", ["auto", "coop"])
@pytest.mark.parametrize("bs", [64, 128])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_sm90_pingpong_rule(rng, tile, bs, symmetric):
    """The default tiles' ping-pong rule (int4_gemm_sm90.cu, Pingpong128ByDefault: fp16,
    64 < M <= 512, K <= 4096, ceil(N / 64) x ceil(M / 128) tiles within a third to one wave of
    SMs), here on B row-major: N = 4160 (65 channel tiles, the last one partial) falls in it at
    M = 65 .. 128 on a 114- or 132-SM Hopper (and to M = 256 on 132 SMs), not at M = 300; the
    same M without the rule ("coop")."""
    k, n = 1024, 4160
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, "float16", symmetric, True)
    sess = _sm90_session(model, env={"PYQUANT_INT4_SM90_TILE": tile, "PYQUANT_INT4_SHUFFLE": "0"})
    _check_int4(sess, rng, [65, 100, 128, 129, 200, 256, 300], k, n, bs, "float16", b, scales_t, zp, bias_t)


@pytest.mark.parametrize("shuffle", ["default", "0"])
@pytest.mark.parametrize("kn", [(4096, 4096), (8192, 4096)])
@pytest.mark.parametrize("bs", [64, 128])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_sm90_tile192_rule(rng, shuffle, kn, bs, symmetric):
    """The default tiles' 192-token rule (int4_gemm_sm90.cu, Tile192ByDefault: fp16,
    128 < M <= 192, N, K >= 4096): the 64 x 192 ping-pong tiles on 4096 x 4096, the 128 x 192
    cooperative ones with K = 8192; M = 128 / 193 on the tiles around them. Under the op's own
    defaults (B shuffled on both layers since session 45), and with B row-major
    (PYQUANT_INT4_SHUFFLE=0)."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, "float16", symmetric, True)
    sess = _sm90_session(model, min_m=None, env={} if shuffle == "default" else {"PYQUANT_INT4_SHUFFLE": "0"})
    _check_int4(sess, rng, [128, 129, 160, 192, 193], k, n, bs, "float16", b, scales_t, zp, bias_t)


@pytest.mark.parametrize("tile", ["auto", "coop"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bs", [64, 128])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_wide_layer_default_dispatch(rng, tile, dtype, bs, symmetric):
    """A 2048 -> 8192 layer (K x N) under the op's own defaults: since session 42 its B is
    shuffled in place (matmul_int4.h, Int4ShuffleByDefault: 2^24 <= N * K < 2^25, N >= 4 K; N >= K
    since session 45), the
    Hopper GEMM starts at M = 33 (kInt4Sm90MinMShuffledWide) and, on fp16, takes the 64 x 128
    ping-pong tiles at M = 65 .. 128 (int4_gemm_sm90.cu, Pingpong128ByDefault with
    K <= kPingpong128MaxK); "coop" without that rule. Every kernel of that dispatch."""
    k, n = 2048, 8192
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    env = {} if tile == "auto" else {"PYQUANT_INT4_SM90_TILE": tile}
    sess = _sm90_session(model, min_m=None, env=env)
    ms = [1, 4, 16, 32, 33, 48, 65, 128, 129, 300]
    _check_int4(sess, rng, ms, k, n, bs, dtype, b, scales_t, zp, bias_t)


SCHEDULER_KNOBS = {
    "dp": {"PYQUANT_INT4_SM90_DECOMP": "dp"},
    "streamk": {"PYQUANT_INT4_SM90_DECOMP": "streamk"},
    "heuristic": {"PYQUANT_INT4_SM90_DECOMP": "heuristic"},
    "split2": {"PYQUANT_INT4_SM90_DECOMP": "splitk", "PYQUANT_INT4_SM90_SPLITS": "2"},
    "split3": {"PYQUANT_INT4_SM90_DECOMP": "splitk", "PYQUANT_INT4_SM90_SPLITS": "3"},
    "split8": {"PYQUANT_INT4_SM90_DECOMP": "splitk", "PYQUANT_INT4_SM90_SPLITS": "8"},
    "nondet": {"PYQUANT_INT4_SM90_REDUCE": "nondet"},
    "split4nondet": {
        "PYQUANT_INT4_SM90_DECOMP": "splitk",
        "PYQUANT_INT4_SM90_SPLITS": "4",
        "PYQUANT_INT4_SM90_REDUCE": "nondet",
    },
    "rm2": {"PYQUANT_INT4_SM90_RASTER": "m", "PYQUANT_INT4_SM90_SWIZZLE": "2"},
    "rn2": {"PYQUANT_INT4_SM90_RASTER": "n", "PYQUANT_INT4_SM90_SWIZZLE": "2"},
}


def _knob_session(model, knobs: dict[str, str]):
    return _sm90_session(model, env=knobs)


@pytest.mark.parametrize("knob", sorted(SCHEDULER_KNOBS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kn", [(4096, 520), (2000, 264)])
def test_int4_sm90_scheduler_knobs(rng, knob, dtype, kn):
    """The Hopper GEMM's scheduler knobs (PYQUANT_INT4_SM90_DECOMP / _SPLITS / _REDUCE / _RASTER /
    _SWIZZLE, ort_ops/cuda/env_knobs.h) at every tile configuration: split-K factors that do
    and do not divide the K tiles (K = 2000: 32 tiles of 64, the last partial), the unordered
    reduction, both raster orders."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, 128, dtype, bool(rng.integers(0, 2)), True)
    sess = _knob_session(model, SCHEDULER_KNOBS[knob])
    _check_int4(sess, rng, [17, 64, 100, 300, 777], k, n, 128, dtype, b, scales_t, zp, bias_t)


@pytest.mark.parametrize("knob", ["split4", "streamk", "dp"])
def test_int4_sm90_deterministic_knobs(rng, knob):
    """Split-K and stream-K with the default (ordered) reduction give the same bits run to run."""
    knobs = {"split4": {"PYQUANT_INT4_SM90_DECOMP": "splitk", "PYQUANT_INT4_SM90_SPLITS": "4"}}.get(
        knob, {"PYQUANT_INT4_SM90_DECOMP": knob}
    )
    k, n, bs, dtype = 4096, 512, 128, "float16"
    model, *_ = _int4_case(rng, k, n, bs, dtype, True, True)
    sess = _knob_session(model, knobs)
    for m in [64, 300]:
        x = _as_t(rng.standard_normal((m, k)), dtype)
        y0 = run_cuda(sess, x, n, dtype)
        for _ in range(3):
            np.testing.assert_array_equal(run_cuda(sess, x, n, dtype), y0)


@pytest.mark.parametrize(
    "env", [{"PYQUANT_INT4_SHUFFLED_COPY": "1"}, {"PYQUANT_INT4_SM90_TILE": "shuf"}], ids=["copy", "shuf"]
)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bs", [64, 128])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("kn", [(4096, 512), (1024, 6656), (2000, 264)])
def test_int4_sm90_shuffled_copy(rng, env, dtype, bs, symmetric, kn):
    """The shuffled weight copy (PYQUANT_INT4_SHUFFLED_COPY=1 / variant "shuf",
    int4_gemm_sm90_shuffled.cu): its nibble order (Int4ShuffleAtom) must reproduce every weight,
    at the default tiles of every M range (Narrow 17 / 64, Wide 100, Mid ping-pong 300 on
    N = 6656, Huge 513 / 1024); shapes the copy does not tile (N % 128, K % 64) keep reading B in
    place, and M = 1 / 5 the small-M kernels on B: all must be right."""
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    sess = _knob_session(model, env)
    _check_int4(sess, rng, [1, 5, 17, 64, 100, 300, 513, 1024], k, n, bs, dtype, b, scales_t, zp, bias_t)
