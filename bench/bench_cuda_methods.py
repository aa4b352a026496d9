"""The methods of bench/bench_cuda.py: the default list (METHODS) and the variants selected through
the library's environment switches (METHOD_ENV, read when a session's kernels are created).

Methods (fp16 activations):
  pyquant_int4      pyquant::MatMulInt4, block 128, symmetric (B [N, n_blocks, 64], scales fp16)
  pyquant_int4_tiled  the same with PYQUANT_INT4_TILED_MIN_M=0 and the Hopper GEMM off (the tiled
                    kernel at every M)
  pyquant_int4_portable  the same with the Hopper GEMM off (PYQUANT_INT4_SM90_MIN_M huge): the
                    mma.sync kernels that serve GPUs other than sm_90
  ort_matmulnbits   com.microsoft::MatMulNBits on the same B / scales bytes (K, N, bits=4, block_size=128)
  ort_matmul_fp16   ONNX MatMul, fp16 weight initializer [K, N]
  torch_fp16        torch.nn.functional.linear, fp16 weight [N, K] (torch CUDA graph)
  pyquant_fp8       pyquant::LinearFp8, per-channel weight scales, dynamic per-token activation scales
  pyquant_fp8wo     pyquant::LinearFp8 with weight_only=1 (weight-only FP8: X not quantized) (not in the
                    default list); pyquant_fp8wo_portable: the same without its Hopper GEMM
                    (PYQUANT_FP8_SM90_MIN_M huge: the mma.sync kernel at every M); pyquant_fp8wo_from<M>:
                    the Hopper GEMM from M (65, 129, 257, 1025)
  torch_scaled_mm   torch._scaled_mm, e4m3 x e4m3 -> fp16, per-tensor scales, X already in fp8 (GEMM only)
  pyquant_fp8_portable  pyquant_fp8 with the Hopper GEMM off (PYQUANT_FP8_SM90_MIN_M huge): the
                    mma.sync kernels that serve GPUs other than sm_90 (not in the default list)
  pyquant_fp8_<variant>  pyquant_fp8 under the environment switches of METHOD_ENV (swap, the Hopper
                    tiles of pyquant/_cuda_knobs.py FP8_SM90_TILES, p128all, p64all, p8, p16, rm2,
                    rn4, dp, sk, heur, split2/4/8, nondet, sm90min<M>, fill2 / fill4: the mma
                    kernel's K split aimed at 2 / 4 CTAs per SM, nt1 / nt2 / nt4 / nt4fill2: its
                    column tiles per warp at M > 16; staged / staged65: the staged kernel
                    (linear_fp8_staged.h) below the Hopper GEMM / at every M <= 64; nostaged: the
                    default without it (the session-20 default); c16 / staged65c16: the staged
                    kernel's K split in clusters of up to 16 (PYQUANT_STAGED_MAX_CLUSTER=16); tall / wide:
                    its CTA shape (PYQUANT_FP8_STAGED_SHAPE); tc / tc1..tc5: the tensor-core fused
                    GEMV (session 44) below the Hopper GEMM, automatic / pinned configuration; notc:
                    the default without it; see
                    ort_ops/cuda/linear_fp8.h) (not in the default list)
  pyquant_int4_<knob>  the Hopper GEMM's scheduler under PYQUANT_INT4_SM90_* (dp, sk, heur, split2/3/4/8,
                    nondet, sknondet, split2nondet, split4nondet, rm2, rn2; see
                    ort_ops/cuda/env_knobs.h) (not in the default list)
  pyquant_int4_<tile>  the Hopper GEMM's tiles under PYQUANT_INT4_SM90_TILE (pyquant/_cuda_knobs.py
                    INT4_SM90_TILES; p128, w192 and p192 also on the shuffled order; coop: the default
                    tiles without the 64 x 128 ping-pong rule of int4_gemm_sm90.cu) (not in the default
                    list)
  pyquant_int4_shuf  the Hopper GEMM on the shuffled weight copy (as PYQUANT_INT4_SHUFFLED_COPY=1:
                    ort_ops/cuda/sm90/int4_gemm_sm90_shuffled.cu) (not in the default list; since
                    the in-place shuffle is the default, the same as pyquant_int4 on shapes it tiles)
  pyquant_int4_plain  B read row-major as stored (PYQUANT_INT4_SHUFFLE=0: no in-place rewrite, the
                    Hopper default before 2026-11-24) (not in the default list)
  pyquant_int4_all  B rewritten in the shuffled order on every layer it tiles (PYQUANT_INT4_SHUFFLE=all;
                    the default does it from N * K >= 2^25, and from 2^24 where N >= K) (not in the
                    default list)
  pyquant_int4_sv<v>  a shuffled-order kernel variant (PYQUANT_INT4_SHUF_VARIANT; 0..7 mma.sync,
                    8, 9 the wide shared-memory kernel, 10..15, 18, 20, 22 CUDA-core GEMV, 40 / 41 / 42
                    the staged mma kernel with automatic / wide / tall CTAs where M is past the GEMV,
                    60..67 the piece mma kernel's configurations and 68 its automatic choice:
                    ort_ops/cuda/matmul_int4.h), on every layer (not in the default list)
  pyquant_int4_nopiece  the default without the piece mma kernel (PYQUANT_INT4_SHUF_VARIANT=-3: the
                    kernels it replaced at M <= 16 on narrow layers) (not in the default list)
  pyquant_int4_paired / _sv<60..68>p  the default / a piece kernel variant with its MMAs regrouped
                    so that X needs no register moves (PYQUANT_INT4_PIECE_PAIRED=1, the default since
                    session 44); pyquant_int4_unpaired: session 43's grouping (not in the default list)
  pyquant_int4_wide / _wide1  the wide shared-memory kernel (variant 8 / 9) on every layer at every
                    M, Hopper GEMM off (not in the default list); _wide_f3: variant 8 with its K
                    split aimed at 3 CTAs per SM (PYQUANT_INT4_WIDE_FILL=300)
  pyquant_int4_xahead  the default with the register mma kernel's X fragments loaded one k16 step
                    ahead (PYQUANT_INT4_SHUF_XAHEAD=1) (not in the default list)
  pyquant_int4_piece64  the piece kernel's configuration 1 below a Hopper GEMM that is off: M > 32 in
                    grid rows of 64 tokens (PYQUANT_INT4_SHUF_VARIANT=61; not in the default list)
  pyquant_int4_nowide  the default dispatch without the wide kernel (PYQUANT_INT4_SHUF_VARIANT=-2;
                    the same as pyquant_int4 while the wide kernel is off by default) (not in the
                    default list)
  pyquant_int4_from<M>  the Hopper GEMM from M on (PYQUANT_INT4_SM90_MIN_M) (not in the default list);
                    pyquant_int4_all_from<M> (M = 17, 33, 65, 97, 129, 193, 257): the same with B
                    shuffled on every layer
  pyquant_int4_again  the default again: an A/A control of the noise between methods (not in the default list)
  pyquant_int4_alt / pyquant_fp8_alt  another build of the library, the one at $PYQUANT_ALT_LIBRARY
                    (bench/device/build_alt.sh), with the knobs of $PYQUANT_ALT_ENV ("NAME=value,...")
                    if given: two commits' kernels timed in one process, interleaved (not in the
                    default list)
  pyquant_int4_mid<v>  the 9 <= M <= 64 mma.sync kernel variant v (PYQUANT_INT4_MID_VARIANT, 0..13),
                    Hopper GEMM from M = 65 (not in the default list)
  pyquant_int4_r32 / _mid<v>r32  the same (default variant / variant v) with 32 rows per CTA at
                    33 <= M <= 64 (PYQUANT_INT4_MID_ROWS=32: two grid rows of MT = 2; the staged
                    kernel, variants 11-13 or where it is the default, then takes 32 tokens per
                    CTA in two grid rows) (not in the default list)
  pyquant_int4_c16  the default with the staged kernel's K split in clusters of up to 16
                    (PYQUANT_STAGED_MAX_CLUSTER=16) (not in the default list)
  pyquant_int4_r64  the default with one row of 64 tokens per CTA at 33 <= M <= 64 (PYQUANT_INT4_MID_ROWS=64;
                    on N <= 512 the session-20 default) (not in the default list)
  pyquant_int4_nosplit  the default without the narrow-layer rules of sessions 18 / 19 (cluster K
                    split, two-row variant 9) (PYQUANT_INT4_MID_VARIANT=nosplit) (not in the default list)
  pyquant_{int4,fp8}_[st256|stagedall]{z1,z4,c4,c4z4,c2z8}  the staged kernels' K split caps
                    (PYQUANT_STAGED_MAX_CLUSTER c<ks>, PYQUANT_STAGED_SPLIT_Z z<kz>:
                    ort_ops/cuda/staged_split.h; z1 = clusters only, the session-23 split); st256:
                    INT4's staged kernel to M = 256 on every narrow layer; stagedall: FP8's at every
                    M (not in the default list)
  pyquant_int4_nostaged  the default without the staged kernel of session 20, i.e. the session-19
                    dispatch (PYQUANT_INT4_MID_VARIANT=nostaged) (not in the default list)
  pyquant_{int4,fp8}_nopdl / _pdllate  programmatic dependent launch off (PYQUANT_CUDA_PDL=0) / on
                    without early weight loads ("late"): ort_ops/cuda/pdl.h (not in the default list)
  pyquant_fp8_gpdl / _g512  the Hopper GEMM under PDL above M = 512 with a late quantizer trigger
                    (PYQUANT_FP8_GEMM_PDL=late, the default since session 15) / under PDL up to
                    M = 512 only (=upto512, the earlier default): ort_ops/cuda/linear_fp8.h (not in
                    the default list; session 15 also measured _qstream / _qsgpdl, a streaming
                    quantizer since removed)
  torch_scaled_mm_q torch per-token activation quantization (amax, scale, e4m3 cast: the same work
                    as pyquant_fp8) + torch._scaled_mm with row-wise scales (s_x [M, 1], s_w [1, N]),
                    bf16 out (what torch supports for row-wise scales) (not in the default list)
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pyquant._cuda_knobs import FP8_SM90_TILES, INT4_SM90_TILES  # noqa: E402

METHODS = [
    "pyquant_int4",
    "pyquant_int4_tiled",
    "pyquant_int4_portable",
    "ort_matmulnbits",
    "ort_matmul_fp16",
    "torch_fp16",
    "pyquant_fp8",
    "torch_scaled_mm",
]


def _alt_knobs() -> dict[str, str]:
    """$PYQUANT_ALT_ENV ("NAME=value,...") as a dict: the *_alt methods' extra environment."""
    out = {}
    for item in filter(None, (p.strip() for p in os.environ.get("PYQUANT_ALT_ENV", "").split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("PYQUANT_"):
            raise SystemExit(f"PYQUANT_ALT_ENV: {item!r} is not PYQUANT_<NAME>=<value>")
        out[name] = value
    return out


# Variants of pyquant_int4 selected through the library's environment switches (read when a
# kernel is created): the tiled mma.sync kernel at every M, the portable kernels only (Hopper GEMM
# off), the Hopper GEMM from M = 1, and the M <= 8 kernel variants of matmul_int4_impl.cu.
_NO_SM90 = {"PYQUANT_INT4_SM90_MIN_M": str(1 << 40), "PYQUANT_INT4_SHUFFLE": "0"}
_PLAIN = {"PYQUANT_INT4_SHUFFLE": "0"}  # B read row-major as stored (the kernels of other GPUs)
METHOD_ENV = {
    # B row-major (no in-place shuffle): the Hopper default before session 9
    "pyquant_int4_plain": _PLAIN,
    # the shuffled-order kernels' variants (PYQUANT_INT4_SHUF_VARIANT: 0..7 mma.sync, 10..15, 18, 20,
    # 22, 26, 28 GEMV, 40..42 staged, 60..68 the piece mma kernel;
    # matmul_int4.h) and the Hopper GEMM's start over them (sm90 from M)
    # (every layer the order tiles, PYQUANT_INT4_SHUFFLE=all, not only the default's large ones)
    "pyquant_int4_all": {"PYQUANT_INT4_SHUFFLE": "all"},
    # the default dispatch without the piece mma kernel (the kernels before session 43), and with
    # its MMAs regrouped so that X needs no register moves
    "pyquant_int4_nopiece": {"PYQUANT_INT4_SHUF_VARIANT": "-3"},
    "pyquant_int4_paired": {"PYQUANT_INT4_PIECE_PAIRED": "1"},
    # session 43's grouping (the default until session 44)
    "pyquant_int4_unpaired": {"PYQUANT_INT4_PIECE_PAIRED": "0"},
    **{
        f"pyquant_int4_sv{v}p": {
            "PYQUANT_INT4_SHUF_VARIANT": str(v),
            "PYQUANT_INT4_SHUFFLE": "all",
            "PYQUANT_INT4_PIECE_PAIRED": "1",
        }
        for v in range(60, 69)
    },
    **{
        f"pyquant_int4_sv{v}": {"PYQUANT_INT4_SHUF_VARIANT": str(v), "PYQUANT_INT4_SHUFFLE": "all"}
        for v in (*range(16), 18, 20, 22, 26, 28, 40, 41, 42, *range(60, 69))
    },
    # the wide shared-memory mma kernel on every layer at every M (Hopper GEMM off): variant 8
    # (automatic tiles and K split) and 9 (128-row CTAs)
    **{
        name: {
            "PYQUANT_INT4_SHUF_VARIANT": v,
            "PYQUANT_INT4_SHUFFLE": "all",
            "PYQUANT_INT4_SM90_MIN_M": str(1 << 40),
        }
        for name, v in (("pyquant_int4_wide", "8"), ("pyquant_int4_wide1", "9"))
    },
    # the piece kernel's configuration 1 at every M below the Hopper GEMM, which is off: M > 32 in
    # grid rows of 64 tokens (kInt4PieceWideConfig, session 49)
    "pyquant_int4_piece64": {"PYQUANT_INT4_SHUF_VARIANT": "61", "PYQUANT_INT4_SM90_MIN_M": str(1 << 40)},
    # the wide kernel with its K split aimed at 3 CTAs per SM instead of 3/4 (PYQUANT_INT4_WIDE_FILL)
    "pyquant_int4_wide_f3": {
        "PYQUANT_INT4_SHUF_VARIANT": "8",
        "PYQUANT_INT4_SHUFFLE": "all",
        "PYQUANT_INT4_SM90_MIN_M": str(1 << 40),
        "PYQUANT_INT4_WIDE_FILL": "300",
    },
    # the register mma kernel with X one k16 step ahead (PYQUANT_INT4_SHUF_XAHEAD, matmul_int4.h)
    "pyquant_int4_xahead": {"PYQUANT_INT4_SHUF_XAHEAD": "1"},
    # the default dispatch without the wide kernel (PYQUANT_INT4_SHUF_VARIANT=-2)
    "pyquant_int4_nowide": {"PYQUANT_INT4_SHUF_VARIANT": "-2"},
    **{f"pyquant_int4_from{m}": {"PYQUANT_INT4_SM90_MIN_M": str(m)} for m in (17, 33, 49, 65, 129, 257)},
    **{
        f"pyquant_int4_all_from{m}": {"PYQUANT_INT4_SM90_MIN_M": str(m), "PYQUANT_INT4_SHUFFLE": "all"}
        for m in (17, 33, 65, 97, 129, 193, 257)
    },
    "pyquant_int4_tiled": {"PYQUANT_INT4_TILED_MIN_M": "0", **_NO_SM90},
    "pyquant_int4_portable": _NO_SM90,
    # the small-M (mid) kernels at every M, in grid rows of 64 tokens (no tiled kernel, no Hopper GEMM)
    "pyquant_int4_midall": {"PYQUANT_INT4_TILED_MIN_M": str(1 << 40), **_NO_SM90},
    # the session-30 default on layers with N * K < 2^25: the Hopper GEMM from M = 49, CUTLASS's
    # stream-K heuristic (session 31 made small layers data-parallel and kept M <= 64 off the GEMM)
    "pyquant_int4_s30": {"PYQUANT_INT4_SM90_MIN_M": "49", "PYQUANT_INT4_SM90_DECOMP": "heuristic"},
    "pyquant_int4_sm90all": {"PYQUANT_INT4_SM90_MIN_M": "1"},
    **{f"pyquant_int4_{t}": {"PYQUANT_INT4_SM90_TILE": t} for t in INT4_SM90_TILES},
    # the default again under another name: an A/A control of the timing noise between methods
    "pyquant_int4_again": {},
    # a ping-pong tile from M = 1 on (below the default Hopper range too)
    **{
        f"pyquant_int4_{t}all": {"PYQUANT_INT4_SM90_TILE": t, "PYQUANT_INT4_SM90_MIN_M": "1"}
        for t in ("p128", "p64")
    },
    # Hopper GEMM scheduler knobs (PYQUANT_INT4_SM90_DECOMP / _SPLITS / _REDUCE,
    # ort_ops/cuda/env_knobs.h): data-parallel, stream-K, split-K 2 / 4 / 8, unordered reduction
    "pyquant_int4_dp": {"PYQUANT_INT4_SM90_DECOMP": "dp"},
    "pyquant_int4_sk": {"PYQUANT_INT4_SM90_DECOMP": "streamk"},
    "pyquant_int4_heur": {"PYQUANT_INT4_SM90_DECOMP": "heuristic"},
    **{
        f"pyquant_int4_split{s}": {"PYQUANT_INT4_SM90_DECOMP": "splitk", "PYQUANT_INT4_SM90_SPLITS": str(s)}
        for s in (2, 3, 4, 8)
    },
    "pyquant_int4_nondet": {"PYQUANT_INT4_SM90_REDUCE": "nondet"},
    "pyquant_int4_sknondet": {"PYQUANT_INT4_SM90_DECOMP": "streamk", "PYQUANT_INT4_SM90_REDUCE": "nondet"},
    **{
        f"pyquant_int4_split{s}nondet": {
            "PYQUANT_INT4_SM90_DECOMP": "splitk",
            "PYQUANT_INT4_SM90_SPLITS": str(s),
            "PYQUANT_INT4_SM90_REDUCE": "nondet",
        }
        for s in (2, 4)
    },
    "pyquant_int4_rm2": {"PYQUANT_INT4_SM90_RASTER": "m", "PYQUANT_INT4_SM90_SWIZZLE": "2"},
    "pyquant_int4_rn2": {"PYQUANT_INT4_SM90_RASTER": "n", "PYQUANT_INT4_SM90_SWIZZLE": "2"},
    "pyquant_fp8_portable": {"PYQUANT_FP8_SM90_MIN_M": str(1 << 40)},
    "pyquant_fp8wo_portable": {"PYQUANT_FP8_SM90_MIN_M": str(1 << 40)},
    **{f"pyquant_fp8wo_from{m}": {"PYQUANT_FP8_SM90_MIN_M": str(m)} for m in (65, 129, 257, 1025)},
    # the default before session 18 on narrow layers: no cluster K split (matmul_int4_impl.cu)
    "pyquant_int4_nosplit": {"PYQUANT_INT4_MID_VARIANT": "nosplit"},
    # the default without the staged kernel (the session-19 dispatch)
    "pyquant_int4_nostaged": {"PYQUANT_INT4_MID_VARIANT": "nostaged"},
    # LinearFp8 variants (ort_ops/cuda/linear_fp8.h, Fp8Options): the swapped-operand M <= 8
    # kernel, sm90 GEMM tiles (FastAccum 128x128 / 128x256, 2x1 clusters; fp16 output) and
    # scheduler knobs; sm90min<M>: the GEMM from M on (the portable kernels below it).
    "pyquant_fp8_swap": {"PYQUANT_FP8_GEMV": "swap"},
    # the small-M mma kernel without its cluster K split, the Hopper GEMM from M = 17 on narrow
    # layers too (the default before session 18)
    "pyquant_fp8_mma": {"PYQUANT_FP8_GEMV": "mma"},
    # the mma kernel with the split (ort_ops/cuda/linear_fp8.h): the default at M >= 3, and at
    # M <= 2 too in place of the fused GEMV
    "pyquant_fp8_mmasplit": {"PYQUANT_FP8_GEMV": "mmasplit"},
    # the staged kernel (X and W through shared memory; session 20, opt-in) wherever the small-M
    # kernels run, and with the Hopper GEMM from M = 65 so that it serves M <= 64 on every layer
    "pyquant_fp8_staged": {"PYQUANT_FP8_GEMV": "staged"},
    "pyquant_fp8_staged65": {"PYQUANT_FP8_GEMV": "staged", "PYQUANT_FP8_SM90_MIN_M": "65"},
    # the default without the staged kernel (the session-20 default)
    "pyquant_fp8_nostaged": {"PYQUANT_FP8_GEMV": "nostaged"},
    # the staged kernels' K split in clusters of up to 16 (PYQUANT_STAGED_MAX_CLUSTER=16), both ops
    "pyquant_fp8_c16": {"PYQUANT_STAGED_MAX_CLUSTER": "16"},
    "pyquant_fp8_staged65c16": {
        "PYQUANT_FP8_GEMV": "staged",
        "PYQUANT_FP8_SM90_MIN_M": "65",
        "PYQUANT_STAGED_MAX_CLUSTER": "16",
    },
    "pyquant_int4_c16": {"PYQUANT_STAGED_MAX_CLUSTER": "16"},
    # the FP8 staged kernel's CTA shape pinned: tall (64 channels x 256 K per stage, twice the CTAs
    # of wide) / wide (128 x 128), wherever it runs
    "pyquant_fp8_tall": {"PYQUANT_FP8_STAGED_SHAPE": "tall"},
    "pyquant_fp8_wide": {"PYQUANT_FP8_STAGED_SHAPE": "wide"},
    **{f"pyquant_fp8_fused{i}": {"PYQUANT_FP8_GEMV": "fused" if i == 0 else f"fused{i}"} for i in range(7)},
    # the tensor-core fused GEMV (linear_fp8_gemv_tc_impl.cu, session 44) wherever the small-M kernels
    # run: automatic configuration / configurations 1..4 (linear_fp8_gemv.h)
    **{f"pyquant_fp8_tc{i or ''}": {"PYQUANT_FP8_GEMV": f"tc{i or ''}"} for i in range(6)},
    # the default without the tc GEMV (the session-43 default)
    "pyquant_fp8_notc": {"PYQUANT_FP8_GEMV": "notc"},
    **{f"pyquant_fp8_{t}": {"PYQUANT_FP8_SM90_TILE": t} for t in FP8_SM90_TILES},
    **{
        f"pyquant_fp8_{t}all": {"PYQUANT_FP8_SM90_TILE": t, "PYQUANT_FP8_SM90_MIN_M": "1"}
        for t in ("p128", "p64")
    },
    "pyquant_fp8_p8": {"PYQUANT_FP8_SM90_PROMOTE": "8"},
    "pyquant_fp8_p16": {"PYQUANT_FP8_SM90_PROMOTE": "16"},
    "pyquant_fp8_rm2": {"PYQUANT_FP8_SM90_RASTER": "m", "PYQUANT_FP8_SM90_SWIZZLE": "2"},
    "pyquant_fp8_rn4": {"PYQUANT_FP8_SM90_RASTER": "n", "PYQUANT_FP8_SM90_SWIZZLE": "4"},
    "pyquant_fp8_dp": {"PYQUANT_FP8_SM90_DECOMP": "dp"},
    "pyquant_fp8_sk": {"PYQUANT_FP8_SM90_DECOMP": "streamk"},
    "pyquant_fp8_heur": {"PYQUANT_FP8_SM90_DECOMP": "heuristic"},
    # the mma kernel's cluster K split aimed at 2 / 4 CTAs per SM (PYQUANT_FP8_KSPLIT_FILL; also which
    # layers keep it up to M = 64)
    **{f"pyquant_fp8_fill{f}": {"PYQUANT_FP8_KSPLIT_FILL": str(f)} for f in (2, 4)},
    # the mma kernel with 2 / 4 column tiles per warp at M > 16 (PYQUANT_FP8_MMA_NT), also with fill 2
    **{f"pyquant_fp8_nt{t}": {"PYQUANT_FP8_MMA_NT": str(t)} for t in (1, 2, 4)},
    "pyquant_fp8_nt4fill2": {"PYQUANT_FP8_MMA_NT": "4", "PYQUANT_FP8_KSPLIT_FILL": "2"},
    **{
        f"pyquant_fp8_split{s}": {"PYQUANT_FP8_SM90_DECOMP": "splitk", "PYQUANT_FP8_SM90_SPLITS": str(s)}
        for s in (2, 4, 8)
    },
    "pyquant_fp8_nondet": {"PYQUANT_FP8_SM90_REDUCE": "nondet"},
    # Session 23: the Hopper GEMMs split along K on narrow layers at M = 17-128, where the staged
    # kernels are latency-bound. FP8 on its 128 x 64 cooperative tile (n64; the default M <= 64 tile
    # is ping-pong, whose scheduler cannot split), INT4 on its default tiles (128 x 64 cooperative to
    # M = 64); the narrow rules that send these shapes to the staged kernels are off.
    **{
        f"pyquant_fp8_n64s{s}": {
            "PYQUANT_FP8_SM90_TILE": "n64",
            "PYQUANT_FP8_SM90_MIN_M": "1",
            "PYQUANT_FP8_SM90_DECOMP": "splitk",
            "PYQUANT_FP8_SM90_SPLITS": str(s),
        }
        for s in (2, 4, 8, 16)
    },
    # the narrow-layer rules of session 22 (the staged kernels up to M = 64 only), and the FP8 staged
    # kernel pinned at every M (also where "auto" keeps the Hopper GEMM: K < 8192 with N > 512)
    "pyquant_fp8_st64": {"PYQUANT_FP8_STAGED_MAX_M": "64"},
    "pyquant_int4_st64": {"PYQUANT_INT4_STAGED_MAX_M": "64"},
    "pyquant_fp8_stagedall": {"PYQUANT_FP8_GEMV": "staged", "PYQUANT_FP8_SM90_MIN_M": str(1 << 40)},
    # The staged kernels' K split (ort_ops/cuda/staged_split.h, session 24): cluster cap c<ks> and grid
    # split cap z<kz>; z1 = the session-23 split (clusters only). st256 / stagedall: the staged kernel
    # also where the default sends the layer to another kernel (INT4 to M = 256 on every narrow layer;
    # FP8 at every M).
    **{
        f"pyquant_{op}_{pre}{name}": {**pre_env, **split_env}
        for op, pre, pre_env in (
            ("int4", "", {}),
            ("fp8", "", {}),
            ("int4", "st256", {"PYQUANT_INT4_STAGED_MAX_M": "256"}),
            ("fp8", "stagedall", {"PYQUANT_FP8_GEMV": "staged", "PYQUANT_FP8_SM90_MIN_M": str(1 << 40)}),
        )
        for name, split_env in (
            ("z1", {"PYQUANT_STAGED_SPLIT_Z": "1"}),
            ("z4", {"PYQUANT_STAGED_SPLIT_Z": "4"}),
            ("c4", {"PYQUANT_STAGED_MAX_CLUSTER": "4"}),
            ("c4z4", {"PYQUANT_STAGED_MAX_CLUSTER": "4", "PYQUANT_STAGED_SPLIT_Z": "4"}),
            ("c2z8", {"PYQUANT_STAGED_MAX_CLUSTER": "2", "PYQUANT_STAGED_SPLIT_Z": "8"}),
        )
    },
    "pyquant_int4_st256": {"PYQUANT_INT4_STAGED_MAX_M": "256"},
    "pyquant_fp8_n64sk": {
        "PYQUANT_FP8_SM90_TILE": "n64",
        "PYQUANT_FP8_SM90_MIN_M": "1",
        "PYQUANT_FP8_SM90_DECOMP": "streamk",
    },
    **{
        f"pyquant_int4_gs{s}": {
            "PYQUANT_INT4_MID_VARIANT": "nosplit",
            "PYQUANT_INT4_SM90_MIN_M": "1",
            "PYQUANT_INT4_SM90_DECOMP": "splitk",
            "PYQUANT_INT4_SM90_SPLITS": str(s),
        }
        for s in (4, 8, 16)
    },
    "pyquant_int4_gsk": {
        "PYQUANT_INT4_MID_VARIANT": "nosplit",
        "PYQUANT_INT4_SM90_MIN_M": "1",
        "PYQUANT_INT4_SM90_DECOMP": "streamk",
    },
    **{f"pyquant_fp8_sm90min{m}": {"PYQUANT_FP8_SM90_MIN_M": str(m)} for m in (17, 33, 49, 65, 129)},
    **{f"pyquant_int4_v{i}": {"PYQUANT_INT4_GEMV_VARIANT": str(i), **_PLAIN} for i in range(12)},
    # the 9 <= M <= 64 mma.sync kernel variants (matmul_int4_impl.cu, PYQUANT_INT4_MID_VARIANT)
    # with the Hopper GEMM from M = 65 only, so that they serve the whole range
    **{
        f"pyquant_int4_mid{i}": {
            "PYQUANT_INT4_MID_VARIANT": str(i),
            "PYQUANT_INT4_SM90_MIN_M": "65",
            **_PLAIN,
        }  # noqa: E501
        for i in range(14)
    },
    # the same at 33 <= M <= 64 with 32 rows per CTA (MT = 2, two grid rows; PYQUANT_INT4_MID_ROWS=32):
    # r32 = the default variant choice there, mid<v>r32 = variant v
    "pyquant_int4_r32": {"PYQUANT_INT4_MID_ROWS": "32", "PYQUANT_INT4_SM90_MIN_M": "65", **_PLAIN},
    # one row of 64 tokens per CTA at 33 <= M <= 64 (on the K-split layers, N <= 512: the session-20
    # default, before the staged kernel took two rows of 32 there)
    "pyquant_int4_r64": {"PYQUANT_INT4_MID_ROWS": "64"},
    **{
        f"pyquant_int4_mid{i}r32": {
            "PYQUANT_INT4_MID_VARIANT": str(i),
            "PYQUANT_INT4_MID_ROWS": "32",
            "PYQUANT_INT4_SM90_MIN_M": "65",
            **_PLAIN,
        }
        for i in (1, 2, 3, 9, 10, 11, 12, 13)
    },
    # Programmatic dependent launch (ort_ops/cuda/pdl.h) off, or on without early weight loads.
    **{
        f"pyquant_{op}_{name}": {"PYQUANT_CUDA_PDL": value}
        for op in ("int4", "fp8")
        for name, value in (("nopdl", "0"), ("pdllate", "late"))
    },
    # FP8 GEMM launch (ort_ops/cuda/linear_fp8.h): under PDL above M = 512 too, after a quantizer that
    # triggers it late (the default since session 15), or not above 512 (the earlier default).
    "pyquant_fp8_gpdl": {"PYQUANT_FP8_GEMM_PDL": "late"},
    "pyquant_fp8_g512": {"PYQUANT_FP8_GEMM_PDL": "upto512"},
    # A / B of two builds in one process: the op library at $PYQUANT_ALT_LIBRARY (another commit's
    # libpyquant_ops.so, e.g. from bench/device/build_alt.sh) registered in these methods' sessions,
    # with the knobs of $PYQUANT_ALT_ENV ("NAME=value,NAME=value") for that build only
    **{
        f"pyquant_{op}_alt": {"PYQUANT_LIBRARY": os.environ.get("PYQUANT_ALT_LIBRARY", ""), **_alt_knobs()}
        for op in ("int4", "fp8")
    },
}
