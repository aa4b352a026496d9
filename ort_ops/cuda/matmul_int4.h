// MatMulInt4 CUDA launcher: pointers, sizes, stream -> status. Validation and shapes live in
// ops/matmul_int4.h; the ORT op struct is matmul_int4_op.cc; kernels in matmul_int4_impl.cu(h).
#pragma once

#include <cuda_runtime.h>

#include "cuda/pdl.h"
#include "cuda/sm90/launch_control.h"
#include "cuda/staged_split.h"
#include "ops/matmul_int4.h"

namespace pyquant {

// p.x, p.b, p.scales, p.zero_points, p.bias, p.y are device pointers (ORT's CUDA allocations).
// T is float, __half or __nv_bfloat16 (matching p.x / p.scales / p.bias / p.y).
//
// LaunchMatMulInt4 picks the fastest kernel that covers the problem (tensor-core kernels for
// fp16/bf16, block_size >= 32, K % 8 == 0, 16-byte aligned X and B; the reference kernel
// otherwise). LaunchMatMulInt4Ref always runs the plain reference kernel (the ground truth of
// the device tests; selected for every node when PYQUANT_CUDA_KERNELS=ref is set).
//
// tiled_min_m: from this M on, the tiled (shared-memory) kernel instead of the small-M kernel
// (default kInt4TiledMinM; PYQUANT_INT4_TILED_MIN_M overrides it per kernel creation, for
// benchmarks).
//
// sm90: on a compute-capability-9.0 GPU, when the library was built with the sm_90a kernels
// (PYQUANT_WITH_SM90) and the node prepared them (PrepareMatMulInt4Sm90), M >= sm90_min_m runs the
// CUTLASS mixed-input wgmma GEMM (sm90/int4_gemm_sm90.h; block_size 64/128/256, K % 32 == 0, N % 8 == 0).
//
// ws: device scratch (MatMulInt4WorkspaceBytes bytes): the split-K sums of the tiled kernel
// (M * N floats when a split is used) or the sm90 GEMM's stream-K partial tiles. With less, the
// tiled kernel runs without split-K and the sm90 GEMM is not used.
constexpr int64_t kInt4TiledMinM = 65;
constexpr int64_t kInt4Sm90MinM = 49;
// The Hopper GEMM's first M on the wide layers of 2^24 <= N * K < 2^25 that Int4ShuffleByDefault
// (below) rewrites in the shuffled order: there M = 33-48 on that order's register mma kernel is
// twice the GEMM's time (H200, 2048 x 8192 at M = 48: 32.1 against 15.7 us,
// bench/results/2026-11-28-h200-s42-sq-bench-cuda.md).
constexpr int64_t kInt4Sm90MinMShuffledWide = 33;
// Its first M instead on those layers where the piece mma kernel serves through M = 64
// (Int4ShuffledPieceByDefault: N / 16 <= 2 SMs, i.e. 4096 x 4096), since session 49: the kernel's
// 48- / 64-token instances (kInt4PieceWideConfig) beat the GEMM at M = 33-64 there.
constexpr int64_t kInt4Sm90MinMShuffledSquare = 65;
// Short rows (K <= kInt4MidRowsMaxK): see Int4Sm90Prepared::mid_rows_rule.
constexpr int64_t kInt4MidRowsMaxK = 2048;
// The wide kernel's K split: the smallest of 1, 2, 4, 8 whose grid reaches wide_fill CTAs per 100
// SMs (each rank keeping >= 4 chunks). Nsight Compute on 4096 x 14336, M = 1
// (bench/results/2026-11-24-h100-s11-wide3-ncu-m1.txt): at 75, 112 CTAs, 8 warps per SM, issue-bound
// (0.49 eligible warps per scheduler, 5 cycles between a warp's instructions); PYQUANT_INT4_WIDE_FILL
// (read at kernel creation, Int4ShufKnobs::wide_fill) sets it for benchmarks.
constexpr int kInt4ShuffledWideFill = 75;
// The register mma kernel with each k16 step's X fragments loaded ahead (during earlier steps'
// MMAs) instead of right before their use: Nsight Compute on 4096 x 14336, M = 16
// (bench/results/2026-11-24-h100-s11-ncu-shufmma-m16w.txt) has 30 % of its stall cycles waiting on
// L1TEX loads, and the weights are already a group ahead. Session 11 (H100, the loop before session
// 40's leaner one): one step ahead paid at 9 <= M <= 16 only (19.3 / 22.4 us against 19.8 / 23.1 at
// M = 16 on 4096 x 14336 / 8192 x 8192; M = 2-8 6 % slower; 2026-11-24-h100-s11-xahead-bench-cuda.md).
// Session 40 (H200, the leaner loop; 2026-11-28-h200-s40-addr-xa{1,2}-bench-cuda.md): two steps
// ahead at every M <= 16 (MT8 <= 2), 11.7 / 11.8 / 15.7 / 16.2 us at M = 5 / 8 / 12 / 16 on
// 4096 x 14336 and 13.3 / 14.6 / 18.1 / 19.3 on 8192 x 8192, against 11.8 / 12.3 / 15.3 / 16.5 and
// 14.9 / 15.5 / 17.8 / 19.5 one step ahead. Steps ahead by default, per MT8 (0 = none):
constexpr int Int4ShuffledXAheadDefault(int mt8) { return mt8 <= 2 ? 2 : 0; }
struct Int4Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};
// Benchmark knobs of the shuffled-order kernels (LaunchMatMulInt4Shuffled), read from the
// environment at kernel creation (matmul_int4_op.cc); the defaults are the production choice.
//   variant: PYQUANT_INT4_SHUF_VARIANT, -1 = the default dispatch (see kInt4ShuffledGemvVariantBase);
//   wide_fill: PYQUANT_INT4_WIDE_FILL, the wide kernel's K-split target (kInt4ShuffledWideFill);
//   x_ahead: PYQUANT_INT4_SHUF_XAHEAD = 0 / 1 / 2, the register mma kernel's X fragments loaded one
//     (2: two, at MT8 <= 2) k16 steps ahead of their MMAs (-1 = Int4ShuffledXAheadDefault);
//   piece_paired: PYQUANT_INT4_PIECE_PAIRED (default 1; "0" = session 43's grouping), the piece
//     kernel's MMAs regrouped so that each B operand is an aligned register pair of one X load (no
//     moves: 264 SASS instructions per 4 units against 288). Default since session 44: H200, equal
//     or up to 4 % faster at M = 1-16 on 14336 x 4096, 8192^2, 2048 x 8192 (14336 x 4096 M = 1 / 8:
//     10.4 / 11.8 us against 10.8 / 12.0; bench/results/2026-11-28-h200-s44-paired-bench-cuda.md).
struct Int4ShufKnobs {
  int variant = -1;
  int wide_fill = kInt4ShuffledWideFill;
  int x_ahead = -1;
  bool piece_paired = true;
};
// Inputs of the sm90 GEMM that the node derives once from constant scales / zero points:
// scales_t [n_blocks, N] T = scales transposed, zeros_t [n_blocks, N] T = -zp * scale.
// min_m: the sm90 GEMM serves M >= min_m; min_m_large applies instead to layers with
// N * K >= 2^25 (4096 x 8192): there its fixed ~3x-floor cost mostly beats the small-M kernels
// from M = 17 (H100, M = 32: 29.4 / 34.7 / 35.8 us against 39.9 / 31.3 / 37.4 for the best
// small-M variant on 4096 x 14336, 14336 x 4096, 8192 x 8192, K x N); on 4096 x 4096 the small-M
// kernels stay faster through M = 48 (19.0 vs 20.7 us; 10.5 vs 20.5 at M = 32):
// bench/results/2026-11-22-h100-s6-mid-bench-cuda.md, …-s6-ring-bench-cuda.md, …-s6-mid9-bench-cuda.md.
struct Int4Sm90Prepared {
  const void* scales_t = nullptr;
  const void* zeros_t = nullptr;
  // The shuffled weight copy (sm90/int4_gemm_sm90.h), prepared when shuffled_copy is set and B is
  // constant; else nullptr. shuffled_copy: PYQUANT_INT4_SHUFFLED_COPY=1 or tile variant 7 "shuf".
  // Memory: the copy is N * K / 2 more device bytes per node (about the packed weights again);
  // prefill (the Hopper GEMM, M >= min_m) runs 7-25 % faster on an H100; decode (the small-M
  // kernels) keeps reading B in place.
  const void* b_shuffled = nullptr;
  bool shuffled_copy = false;
  // B itself is in the shuffled order (the op rewrote the constant initializer in place at
  // session creation, matmul_int4_op.cc): b_shuffled == B, and every M runs a kernel that reads
  // that order (the Hopper GEMM, or LaunchMatMulInt4Shuffled below it, with `shuf`).
  bool b_in_place = false;
  Int4ShufKnobs shuf;
  int64_t min_m = kInt4Sm90MinM;
  int64_t min_m_large = 17;
  // The same for B in the shuffled order on the smaller wide layers that Int4ShuffleByDefault
  // rewrites (kInt4Sm90MinMShuffledWide).
  int64_t min_m_shuffled_wide = kInt4Sm90MinMShuffledWide;
  // And on those of them where the piece kernel runs M < kInt4Sm90MinMShuffledSquare.
  int64_t min_m_shuffled_square = kInt4Sm90MinMShuffledSquare;
  // Small layers with short rows (K <= kInt4MidRowsMaxK) from M = kInt4Sm90MinM on: the default mid
  // kernel in grid rows of 64 tokens, in place of the Hopper GEMM (or the tiled kernel), while that
  // grid (ceil(N / 32) x ceil(M / 64) CTAs) fits one wave of SMs (matmul_int4_impl.cu, MidRowsRule).
  // H100, session 31 (bench/results/2026-11-27-h100-s31-small-default-bench-cuda.md, column midall
  // against the GEMM, us, K x N): 576 x 576 at M = 128 / 256 6.2 / 6.3 vs 8.0 / 8.0 (torch fp16 3.1);
  // 1536 x 576 10.0 / 10.0 vs 14.5 / 14.6; 2048 x 2048 at M = 64 / 128 11.5 / 11.9 vs 15.5 / 19.1;
  // 576 x 192 at M = 1024 6.3 vs 10.6. Past one wave it loses (576 x 1536 at M = 256: 12.2 vs 8.5).
  // Off when PYQUANT_INT4_SM90_MIN_M or PYQUANT_INT4_TILED_MIN_M is set (tests and benchmarks that
  // pin a path).
  bool mid_rows_rule = true;
  // Narrow layers keep the small-M kernel up to M = 64 instead of this GEMM: its cluster K split
  // or its two-row variant 9 (matmul_int4_impl.cu, NarrowRuleFor); false under
  // PYQUANT_INT4_MID_VARIANT=nosplit.
  bool narrow_rules = true;
  int tile_variant = 0;  // PYQUANT_INT4_SM90_TILE: sm90::Int4GemmArgs::variant
  // PYQUANT_INT4_SM90_DECOMP / _SPLITS / _REDUCE / _RASTER / _SWIZZLE (ReadSm90SchedulerTuning,
  // env_knobs.h); decomposition_auto: the launcher picks the decomposition per call.
  sm90::Sm90SchedulerTuning sched;
  bool decomposition_auto = true;
};
template <typename T>
size_t MatMulInt4WorkspaceBytes(const MatMulInt4Problem& p, int64_t tiled_min_m = kInt4TiledMinM,
                                const Int4Sm90Prepared* sm90 = nullptr);
// gemv_variant: the M <= 8 kernel variant (matmul_int4_impl.cu), -1 = the default choice.
// pdl: programmatic dependent launch of the fast kernels (cuda/pdl.h; the sm90 GEMM: sm90/launch_control.h).
// mid_variant: the 9 <= M <= 64 kernel variant (matmul_int4_impl.cu), -1 = the default choice,
// kInt4MidNoKSplit = the default without the narrow-layer rules (benchmarks), kInt4MidNoStaged = the
// default without the staged kernel (the session-19 choice; benchmarks).
// mid_rows: the M rows one CTA of that kernel covers at 33 <= M <= 64: 64 (MT = 4 m16 tiles, one grid
// row), 32 (MT = 2, two grid rows), 0 = the default choice.
// staged_split: the staged kernel's K split caps (PYQUANT_STAGED_MAX_CLUSTER / _SPLIT_Z; staged_split.h).
// staged_max_m: on sm_90's narrow layers (matmul_int4_impl.cu, NarrowRuleFor) the staged kernel also
// serves 64 < M <= staged_max_m, in grid rows of 64 tokens, ahead of the Hopper GEMM and the tiled
// kernel (default mid_variant only). 0 = the default rule: up to kInt4StagedMaxM on the K-split
// layers (N <= 512), and on the two-row layers (N ~ 1024) up to kInt4StagedMaxMTwoRows, or
// kInt4StagedMaxMTwoRowsShortK where K <= 8192. PYQUANT_INT4_STAGED_MAX_M sets one cap for both
// (benchmarks; 64 = off).
constexpr int kInt4MidNoKSplit = -2;
constexpr int kInt4MidNoStaged = -3;
constexpr int64_t kInt4StagedMaxM = 256;
constexpr int64_t kInt4StagedMaxMTwoRows = 128;
constexpr int64_t kInt4StagedMaxMTwoRowsShortK = 192;
template <typename T>
cudaError_t LaunchMatMulInt4(const MatMulInt4Problem& p, cudaStream_t stream, int64_t tiled_min_m = kInt4TiledMinM,
                             Int4Workspace ws = {}, const Int4Sm90Prepared* sm90 = nullptr, int gemv_variant = -1,
                             PdlMode pdl = {}, int mid_variant = -1, int mid_rows = 0,
                             StagedSplitLimits staged_split = {}, int64_t staged_max_m = 0);

// True when this build has the sm90 GEMM, the current device is compute capability 9.0, and the
// problem's shape / type / block size suit it (pointers aside): worth preparing for.
template <typename T>
bool MatMulInt4Sm90Candidate(const MatMulInt4Problem& p);
// Bytes PrepareMatMulInt4Sm90 writes at `dst` (16-byte aligned pieces). with_b_copy: also the
// shuffled weight copy when knobs.shuffled_copy asks for it.
template <typename T>
size_t MatMulInt4Sm90PreparedBytes(const MatMulInt4Problem& p, const Int4Sm90Prepared& knobs, bool with_b_copy);
// Writes scales_t / zeros_t for p's scales and zero points at dst and checks them: *usable is
// false when a scale is not finite or -zp * scale overflows T (then the portable kernels keep
// exact IEEE semantics). With with_b_copy, also the shuffled weight copy if out->shuffled_copy
// (out->b_shuffled; nullptr when not asked for or the shape has none). Synchronizes
// `stream` once to read the check; must not be called during CUDA graph capture.
// out->scales_t / zeros_t / b_shuffled point into dst.
template <typename T>
cudaError_t PrepareMatMulInt4Sm90(const MatMulInt4Problem& p, bool with_b_copy, void* dst, cudaStream_t stream,
                                  Int4Sm90Prepared* out, bool* usable);
template <typename T>
cudaError_t LaunchMatMulInt4Ref(const MatMulInt4Problem& p, cudaStream_t stream);

// Kernels on the shuffled weight order (layout/int4_shuffled.h; matmul_int4_shuffled_*impl.cu),
// for a node whose B the op rewrote in place:
//   Int4ShuffledWeightBytes(n, k): N * K / 2 when the op shuffles this shape (N % 128 == 0,
//     K % 64 == 0), else 0;
//   ShuffleInt4Weights: writes the shuffled order of the row-major codes `src` ([N, row_bytes])
//     at dst (Int4ShuffledWeightBytes bytes; dst must not overlap src) on `stream`;
//   LaunchMatMulInt4Shuffled: p.b in the shuffled order, T = __half / __nv_bfloat16, block_size
//     64 / 128 / 256: the piece mma kernel where Int4ShuffledPieceByDefault picks it (16-byte
//     aligned X), else the CUDA-core GEMV where Int4ShuffledGemvDefaultConfig picks it (M <= 4,
//     16-byte aligned X; not Int4ShuffledStagedOverGemv), else on narrow layers the staged mma
//     kernel (Int4ShuffledStagedByDefault; 16-byte aligned X, K a whole number of its stages), else
//     the register mma.sync kernel (4-byte aligned X), else the reference.
//     variant: -1 = default; -2 the default without the wide kernel, -3 without the piece kernel;
//     0..7 the mma kernel's (NT, warps, U, cluster) configurations; 8, 9 the wide kernel (below);
//     40..42 the staged kernel (kInt4ShuffledStagedVariantBase);
//     kInt4ShuffledGemvVariantBase + v the
//     GEMV's (pieces per CTA tile, tiles, threads, k-tiles per unit[, CTAs per SM at M = 1 by
//     registers]) configuration v: 0: (4, 1, 128, 4), 1: (8, 1, 128, 4), 2: (2, 1, 128, 4),
//     3: (4, 2, 128, 4), 4: (8, 2, 128, 4), 5: (8, 1, 128, 4, 8), 8: (8, 1, 256, 4, 4),
//     10: (8, 1, 512, 4, 2), 12: (8, 1, 128, 4, 7), up to M = kInt4ShuffledGemvMaxM (another
//     number runs configuration 0). Chunk mode (matmul_int4_shuffled_gemv_impl.cu, kD units per
//     chunk issued together with their scales): (pieces, tiles, threads, k-tiles per unit, CTAs
//     per SM, kD) 16: (8, 1, 256, 4, 4, 1), 18: (8, 1, 512, 4, 2, 1). Measured in session 49 and
//     removed: 20, configuration 12 with each next unit's scales loaded with its weights, before
//     the current unit's arithmetic (H200, gemv_micro, M = 1, 4096 x 14336: 10.79 against 9.98 us;
//     bench/results/2026-11-29-h200-s49-m1-gemvmicro.log; code: git show f330223).
//     Measured in session 36 and removed, slower than these on every shape (…-s36-shufregs-bench-cuda.md, …-s36-gemvcaps-bench-cuda.md; code: git show b075a9a):
//     6: (4, 1, 128, 4, 8), 7: (4, 2, 128, 4, 4), 9: (4, 1, 256, 4, 4), 11: (4, 2, 256, 4, 2),
//     13: (8, 1, 128, 4, 6), 14: (8, 1, 256, 4, 3).
//   LaunchMatMulInt4ShuffledRef: one thread per output through Int4ShuffledCodeAt.
// The op rewrites B by default for layers of N * K >= kInt4ShuffleMinWeights (4096 x 8192 and up;
// Int4ShuffleByDefault). Until session 36 also only where N >= K: on narrow layers the shuffled
// order lost M = 1 (before the GEMV's register caps, session 36) and M = 5-16 (before the staged
// kernel read it, session 37). H100, 14336 x 4096, row-major against shuffled, us: M = 1 / 2 12.6 /
// 17.2 against 12.9 / 14.6, M = 64 / 256 / 2048 35.0 / 73.8 / 375 against 29.2 / 61.6 / 356 (torch
// fp16 at 2048: 348) (bench/results/2026-11-27-h100-s36-gemvdefault-narrow-bench-cuda.md); M = 5 / 8
// / 16 / 32 17.8 / 17.9 / 25.3 / 34.8 against 18.0 / 18.1 / 20.2 / 29.3 (…-s37-stagedshuf-bench-cuda.md).
// Smaller layers stayed row-major: 4096 x 4096 M = 16 / 32 / 48 8.9 / 10.6 / 19.1 against 10.9 / 11.6
// / 27.9 (same file; before the piece kernel), though M = 1-4 and M >= 64 are faster shuffled (M = 1 5.2 against 4.5, M =
// 2048 113 against 104, torch fp16 102; s36). PYQUANT_INT4_SHUFFLE=all rewrites every layer the order
// tiles (the choice for prefill-bound serving), =0 none.
// Since session 42 also wide layers of 2^24 <= N * K < 2^25 with N >= 4 K (a 1-3B model's gate /
// up projection, 2048 -> 8192), whose Hopper GEMM then starts at kInt4Sm90MinMShuffledWide. H200,
// same run, us, row-major default -> shuffled with the GEMM from M = 33 (torch fp16 10.7-11.3)
// (bench/results/2026-11-28-h200-s42-sq-bench-cuda.md, column pyquant_int4_all_from33):
// 2048 x 8192 at M = 1 / 4 / 8 / 16 5.6 / 8.3 / 11.0 / 11.4 -> 4.3 / 5.5 / 5.7 / 7.4, M = 48 / 64
// 22.3 / 18.2 -> 15.7 / 15.7; it loses M = 24 / 32, 11.6 / 12.3 -> 15.0 / 17.0 (the register mma
// kernel; the GEMM from M = 17 gives 15.9 / 15.6). The other layers of that size do not gain:
// 4096 x 4096 is 14-26 % slower shuffled at M = 16-32, and 8192 x 2048 at M = 1-4 (4.8 / 7.8 ->
// 6.4 / 9.2).
constexpr int64_t kInt4ShuffleMinWeights = int64_t{1} << 25;
constexpr int64_t kInt4ShuffleWideMinWeights = int64_t{1} << 24;
// Session 45: 4096 x 4096 too (N >= K in place of N >= 4 K), now that the piece mma kernel serves
// it at 2 <= M <= 32 (Int4ShuffledPieceByDefault) and the Hopper GEMM from M = 33. H200, same run,
// us, row-major -> shuffled (bench/results/2026-11-28-h200-s45-square-bench-cuda.md, columns
// pyquant_int4_plain -> pyquant_int4; M = 1: pyquant_int4_nopiece, the GEMV that is now its default):
// M = 1 / 2 / 4 / 8 / 16 4.9 / 5.9 / 8.9 / 9.3 / 8.8 -> 4.0 / 4.7 / 4.7 / 4.9 / 7.7; M = 17 / 24 / 32
// 9.6 / 9.9 / 10.5 -> 8.3 / 8.7 / 9.3; M = 48-256 19.7-24.7 -> 17.5-20.5; M = 1024 / 2048 57.1 / 113.9
// -> 54.1 / 109.0 (torch fp16 54.1 / 106.9); M = 33 even (18.3 / 18.8).
constexpr bool Int4ShuffleByDefault(int64_t n, int64_t k) {
  return n * k >= kInt4ShuffleMinWeights || (n * k >= kInt4ShuffleWideMinWeights && n >= k);
}
static_assert(Int4ShuffleByDefault(8192, 2048) && Int4ShuffleByDefault(14336, 4096) &&
                  Int4ShuffleByDefault(4096, 14336) && Int4ShuffleByDefault(8192, 8192) &&
                  Int4ShuffleByDefault(4096, 4096),
              "the measured wins: 2048 -> 8192, 4096^2 and the large layers (N, K)");
static_assert(!Int4ShuffleByDefault(2048, 8192) && !Int4ShuffleByDefault(4096, 2048) &&
                  !Int4ShuffleByDefault(6144, 2048),
              "8192 -> 2048 loses (N, K); smaller layers are not measured");
constexpr int64_t kInt4ShuffledGemvMaxM = 4;
// The default GEMV configuration for M <= kInt4ShuffledGemvMaxM tokens and N rows on `sms` SMs, or
// -1 for the mma kernel. The GEMV's grid is N / 16 CTAs (configurations 12 / 5, 8, 10: a CTA owns
// 16 rows; 128, 256, 512 threads split K inside the CTA). Registers are capped so that 7 (M = 1,
// configuration 12: 72 registers) or 8 / M (configuration 5), 4 / M and 2 / M CTAs of those sizes
// fit an SM, and the rule takes the most threads per CTA whose grid still fits one wave: every SM
// then holds ~28-32 warps of loads in flight. Uncapped, ptxas (nvcc 13.0) gives the M = 1 kernel
// 167 registers (3 CTAs of 128 threads per SM). H100, same runs, us at M = 1
// (bench/results/2026-11-27-h100-s36-shufregs-bench-cuda.md, …-s36-gemvcaps-bench-cuda.md):
// 4096 x 14336 (896 CTAs) 11.1 with 72 registers (12.8 with 64; 15.6 for configuration 1,
// uncapped, the default until session 36); 8192^2 (512) 13.7-14.0 with 256 threads against
// 18.7-19.4; 14336 x 4096 (256) 12.9 with 512 threads against 12.7 row-major and 16.5 uncapped;
// 4096^2 (256) 4.5 against 5.1-5.2 row-major.
// At M = 2-4 the GEMV stays where its grid fits (8192^2 at M = 2: 16.2 against the mma kernel's
// 18.3; 14336 x 4096 at M = 2 / 4: 14.6 / 22.4 against 26.4 / 26.3), and 4096 x 14336 goes to the
// mma kernel from M = 2 (14.7 against 15.8).
// The CTAs per SM these configurations' register caps guarantee at M = 1 (their kMinBlocks; at M
// tokens that count / M): one source for the rule below and the launches
// (matmul_int4_shuffled_gemv_impl.cu).
constexpr int kInt4ShufGemvCtasPerSm128 = 8;    // configuration 5, 128 threads, 64 registers
constexpr int kInt4ShufGemvCtasPerSm128M1 = 7;  // configuration 12, 128 threads, 72 registers
constexpr int kInt4ShufGemvCtasPerSm256 = 4;    // configuration 8
constexpr int kInt4ShufGemvCtasPerSm512 = 2;    // configuration 10
// Session 48: at M = 1 the chunk-mode forms of 10 / 8 (18 / 16: each unit's scales loaded with its
// weights; matmul_int4_shuffled_gemv_impl.cu). H200, gemv_micro, us, 10 / 8 -> 18 / 16: 14336 x 4096
// 10.54 -> 9.67, 8192^2 12.37 -> 10.94, 4096^2 4.18 -> 4.17
// (bench/results/2026-11-29-h200-s48-m2chunk-gemvmicro.log); in ORT's chain, same run, 14336 x
// 4096 11.1 -> 10.4, 8192^2 12.2 -> 10.9, 4096^2 4.0 -> 4.1 (…-s48-chunk1-bench-cuda.md). At M = 2 /
// 4 no GEMV configuration (8, 10, 16, 18, or 5 in chunk mode, measured and removed; 15 at M = 4)
// comes near the default's mma kernels (piece or register) on the four benchmark layers: M = 2,
// us, default against the best GEMV: 4096 x 14336 11.6 / 14.5, 14336 x 4096 10.8 / 13.4, 8192^2
// 13.0 / 14.7, 4096^2 4.9 / 5.4 (…-s48-m2int4-gemvmicro.log).
constexpr int Int4ShuffledGemvDefaultConfig(int64_t n, int64_t m, int sms) {
  const int64_t ctas = n / 16;
  const int64_t per_sm_512 = kInt4ShufGemvCtasPerSm512 / m, per_sm_256 = kInt4ShufGemvCtasPerSm256 / m,
                per_sm_128 = kInt4ShufGemvCtasPerSm128 / m;
  if (per_sm_512 > 0 && ctas <= sms * per_sm_512) return m == 1 ? 18 : 10;
  if (per_sm_256 > 0 && ctas <= sms * per_sm_256) return m == 1 ? 16 : 8;
  if (m == 1) return 12;
  if (ctas <= sms * per_sm_128) return 5;
  return -1;
}
// The measured cases above, on an H100's 132 SMs.
static_assert(Int4ShuffledGemvDefaultConfig(14336, 1, 132) == 12 && Int4ShuffledGemvDefaultConfig(8192, 1, 132) == 16 &&
                  Int4ShuffledGemvDefaultConfig(4096, 1, 132) == 18,
              "M = 1: 128 / 256 / 512 threads by N");
static_assert(Int4ShuffledGemvDefaultConfig(14336, 2, 132) == -1 && Int4ShuffledGemvDefaultConfig(8192, 2, 132) == 5 &&
                  Int4ShuffledGemvDefaultConfig(4096, 2, 132) == 8 &&
                  Int4ShuffledGemvDefaultConfig(4096, 4, 132) == 5 && Int4ShuffledGemvDefaultConfig(8192, 4, 132) == -1,
              "M = 2-4: the GEMV only where its grid fits one wave");
constexpr int kInt4ShuffledGemvVariantBase = 10;
// Variants kInt4ShuffledStagedVariantBase + shape: the staged mma kernel on the shuffled order
// (matmul_int4_staged.h, LaunchInt4StagedShuffled; shape kInt4StagedAuto / Wide / Tall = 0 / 1 / 2),
// where its plan covers the shape (else the register mma kernel). By default (session 37) it
// serves every M past the GEMV and below the Hopper GEMM on layers where the register mma kernel,
// its 64-row CTAs split over K in 2 (variant 3), has at most one CTA of 8 warps per SM
// (Int4ShuffledStagedByDefault: N / 32 <= SMs, N <= 4224 on an H100). H100, same run, staged
// against the register kernel, us (bench/results/2026-11-27-h100-s37-stagedshuf-bench-cuda.md):
// 14336 x 4096 M = 5 / 8 / 16 18.0 / 18.1 / 20.2 against 26.1 / 26.4 / 30.6 (row-major B, its
// default kernels: 17.8 / 17.9 / 25.3); 4096 x 4096 9.5 / 9.6 / 10.9 / 11.6 (M = 32) against 9.5 /
// 9.7 / 11.2 / 15.2. Wider layers keep the register kernel: 4096 x 14336 M = 5 / 8 14.8 / 14.9
// against 16.5-17.3 (same file), 8192 x 8192 (2 CTAs per SM) M = 4 / 16 18.2 / 22.6 against 20.6
// / 24.9 (…-s36-gemv-final-bench-cuda.md against …-s37-default-bench-cuda.md).
constexpr int kInt4ShuffledStagedVariantBase = 40;
constexpr bool Int4ShuffledStagedByDefault(int64_t n, int sms) { return n / 32 <= sms; }
static_assert(Int4ShuffledStagedByDefault(4096, 132) && !Int4ShuffledStagedByDefault(8192, 132) &&
                  !Int4ShuffledStagedByDefault(14336, 132),
              "the measured layers' choices (comment above)");
// On those layers with long rows (K >= 8192) the staged kernel also takes M = 3-4 from the GEMV:
// its cost hardly moves with M up to 8 tokens per CTA, the GEMV's grows with M. H100, 14336 x 4096
// (…-s37-rule-bench-cuda.md): staged 18.2 / 18.0 / 18.1 us at M = 4 / 5 / 8, GEMV 22.5 at M = 4;
// session 36's GEMV at M = 2 / 3 14.6 / 19.9 (…-s36-gemvdefault-narrow-bench-cuda.md), so M = 2
// stays on the GEMV (M = 3 inferred from the flat staged cost, not timed). On 4096 x 4096 the GEMV
// keeps M <= 4 (7.6 us at M = 4 against the staged kernel's 9.5 at M = 5).
constexpr bool Int4ShuffledStagedOverGemv(int64_t n, int64_t k, int64_t m, int sms) {
  return m >= 3 && k >= 8192 && Int4ShuffledStagedByDefault(n, sms);
}
// Variants kInt4ShuffledWideVariantBase + v: the wide shared-memory mma kernel
// (matmul_int4_shuffled_wide_impl.cu; v = 0: automatic tile and K split, 1: 128-row CTAs). By
// default it serves kInt4ShuffledWideMinM <= M below the Hopper GEMM.
constexpr int kInt4ShuffledWideVariantBase = 8;
// Variants kInt4ShuffledPieceVariantBase + v (v < kInt4ShuffledPieceConfigs): the piece mma
// kernel (matmul_int4_shuffled_piece_impl.cu: a lane's 16-byte piece feeds four MMAs; tokens are
// the MMA's columns, so M = 1..8 cost the same instructions), configuration v = (n16 tiles per
// CTA, warps, units of 64 k in flight per warp, CTAs per SM by registers at M <= 8): 0: (1, 4,
// 4, 6), 1: (1, 8, 4, 3), 2: (1, 16, 4, 2), 3: (1, 4, 8, 4), 4: (1, 4, 3, 8), 5: (2, 8, 4, 2),
// 6: (2, 4, 4, 4), 7: (1, 4, 4, 7) (at 17 <= M <= 32, configurations 1 and 2 with four token
// tiles and 2 units in flight: PieceMt4Config); kInt4ShuffledPieceVariantBase + kInt4ShuffledPieceConfigs:
// Int4ShuffledPieceDefaultConfig (below). Configurations 4 and 7 (one wave of 4-warp CTAs for
// 896-CTA layers at 64 / 72 registers; with PYQUANT_INT4_PIECE_PAIRED=1 without spills on fp16)
// replaced (1, 8, 8, 2) and (1, 32, 4, 1) after session 43's run and are not measured yet.
constexpr int kInt4ShuffledPieceVariantBase = 60;
constexpr int kInt4ShuffledPieceConfigs = 8;
// Where the default dispatch takes the piece kernel (variant -1; -3 keeps the kernels before it,
// for benchmarks), and with which configuration: M <= 16 on layers of N / 16 <= 2 SMs (16 warps
// per CTA), 2 <= M <= 8 on N / 16 <= 4 SMs (two n16 tiles and 8 warps per CTA). H200, same run, us,
// the former default -> the piece kernel (bench/results/2026-11-28-h200-s43-piece-bench-cuda.md):
// 14336 x 4096 (256 CTAs) M = 1 / 2 / 4 / 8 / 16 11.1 / 14.4 / 15.7 / 15.8 / 17.9 -> 10.8 / 10.9 /
// 11.1 / 12.0 / 17.5; 8192 x 8192 (512 tiles) M = 2 / 4 / 8 15.6 / 13.3 / 14.6 -> 13.3 / 13.5 /
// 13.9; 2048 x 8192 M = 2 / 4 / 8 5.2 / 5.5 / 5.7 -> 4.5 / 4.5 / 4.6. Not where it lost: M = 1 on
// those two (12.2 -> 13.1, 4.3 -> 4.4), M = 16 on 8192 x 8192 (19.5 -> 20.4-22.5), and 4096 x
// 14336 (896 tiles; the GEMV 9.7 at M = 1 against 11.6-15.3: with 71-80 registers per thread the
// 4-warp CTAs fill 1.1 waves, the 2-tile ones leave 16 warps per SM; M = 2-8 even).
// Session 45: also 17 <= M <= 32 on N / 16 <= 2 SMs, in one grid row of four token tiles
// (configuration 1: 8 warps, two CTAs per SM; PieceMt4Config). The layers that reach the shuffled
// kernels at those M are the 2^24 <= N * K < 2^25 ones with N >= K (Int4ShuffleByDefault; the
// Hopper GEMM from kInt4Sm90MinMShuffledWide = 33 there): 4096 x 4096, where, H200, same run, us,
// M = 17 / 24 / 32: 8.3 / 8.7 / 9.3 against 12.4 / 12.5 / 12.7 for the register mma kernel and
// 9.6 / 9.9 / 10.5 row-major (torch fp16 13.5-13.8; bench/results/2026-11-28-h200-s45-square-bench-cuda.md).
// Not M = 1 where K <= 4096: there the shuffled GEMV is faster (4096^2: 4.0 against 4.6, same run;
// 14336 x 4096 kept the piece kernel, 10.8 against 11.1, session 43).
// Session 49: on those layers also 33 <= M <= 64 (configuration 1's 64-token instance,
// kInt4PieceWideConfig), with the Hopper GEMM from kInt4Sm90MinMShuffledSquare. H200, ORT's chain,
// same run, 4096 x 4096, us, the GEMM (pyquant_int4_from33) -> the piece kernel: M = 33 / 40 / 48 /
// 64 18.9 / 18.5 / 18.5 / 18.7 -> 13.1 / 13.3 / 14.1 / 16.4 (torch fp16 14.1 / 14.0 / 14.0 / 12.2,
// ORT fp16 14.0 / 14.3 / 14.3 / 11.5; bench/results/2026-11-29-h200-s49-square-bench-cuda.md); in
// gemv_micro at M = 96 / 128 (two grid rows) 26.8 / 29.6 against the GEMM's ~18 in ORT, so not past
// 64 (the register mma kernel, which had these M below the GEMM in gemv_micro: 34.9-35.6). On the larger layers the
// GEMM (from M = 17 / 33) stays: 14336 x 4096 M = 64 52.9 against ~30, 8192^2 48.5 against ~32
// (bench/results/2026-11-29-h200-s49-wide-gemvmicro.log).
// Session 50: M = 33-48 in one grid row of 48 tokens (the kernel's MT8 = 6 instance), 49-64 of 64.
// Same run, us, the 64-token instance (s49's run above) -> 48 tokens: M = 33 / 40 / 48 13.1 / 13.3
// / 14.1 -> 12.0 / 12.6 / 13.0, now faster than fp16 (torch 13.9 / 14.0 / 14.2, ORT 14.1 / 14.2 /
// 14.4); M = 49 / 56 / 64 14.4 / 14.8 / 16.4 (torch 14.2 / 14.2 / 12.3, ORT 14.4 / 14.5 / 11.5);
// two rows of 48 at M = 65-96 22.3-24.6 against the GEMM's 17.6-17.9
// (bench/results/2026-11-29-h200-s50-square-bench-cuda.md).
constexpr bool Int4ShuffledPieceByDefault(int64_t n, int64_t k, int64_t m, int sms) {
  const int64_t tiles = n / 16;
  return (tiles <= 2 * int64_t(sms) && m < kInt4Sm90MinMShuffledSquare && (m > 1 || k > 4096)) ||
         (tiles <= 4 * int64_t(sms) && m >= 2 && m <= 8);
}
constexpr int Int4ShuffledPieceDefaultConfig(int64_t n, int64_t m, int sms) {
  const int64_t tiles = n / 16;
  return tiles <= 2 * int64_t(sms) ? (m > 16 ? 1 : 2) : tiles <= 4 * int64_t(sms) ? 5 : 0;
}
// The op's choice on a GPU of `sms` SMs: the 4096 x 4096 class (2^24 <= N * K < 2^25, K <= N < 4 K)
// only where the piece kernel takes its M = 2-32 (N / 16 <= 2 SMs: 132-SM H100 SXM / H200, not a
// 114-SM H100 PCIe), since the register mma kernel that would run M = 17-32 there is slower than
// row-major (4096^2, H200: 12.4-12.7 against 9.6-10.5 us, …-s45-square-bench-cuda.md).
constexpr bool Int4ShuffleByDefault(int64_t n, int64_t k, int sms) {
  return Int4ShuffleByDefault(n, k) && (n * k >= kInt4ShuffleMinWeights || n >= 4 * k || n / 16 <= 2 * int64_t(sms));
}
static_assert(Int4ShuffleByDefault(4096, 4096, 132) && !Int4ShuffleByDefault(4096, 4096, 114) &&
                  Int4ShuffleByDefault(8192, 2048, 114) && Int4ShuffleByDefault(4096, 14336, 114),
              "the square class needs the piece kernel's range (N, K, SMs)");
// The configurations with a four-token-tile (MT8 = 4) instance for 17 <= M <= 32; the others run
// those M as two grid rows of two token tiles.
constexpr bool PieceMt4Config(int config) { return config == 1 || config == 2; }
// The configuration with 48- and 64-token (MT8 = 6 / 8) instances, for M > 32 in grid rows of 48
// or 64 tokens (PieceWideMt8For, matmul_int4_shuffled_piece_impl.cu).
constexpr int kInt4PieceWideConfig = 1;
static_assert(PieceMt4Config(Int4ShuffledPieceDefaultConfig(4096, 17, 132)), "the default at M = 17-32");
static_assert(Int4ShuffledPieceByDefault(4096, 14336, 1, 132) && !Int4ShuffledPieceByDefault(4096, 4096, 1, 132) &&
                  Int4ShuffledPieceByDefault(4096, 4096, 2, 132) && Int4ShuffledPieceByDefault(4096, 4096, 32, 132) &&
                  Int4ShuffledPieceByDefault(4096, 4096, 64, 132) && !Int4ShuffledPieceByDefault(4096, 4096, 65, 132) &&
                  !Int4ShuffledPieceByDefault(8192, 8192, 1, 132) && Int4ShuffledPieceByDefault(8192, 8192, 2, 132) &&
                  Int4ShuffledPieceByDefault(8192, 8192, 8, 132) && !Int4ShuffledPieceByDefault(8192, 8192, 9, 132) &&
                  !Int4ShuffledPieceByDefault(14336, 4096, 4, 132),
              "the measured choices above (N, M, SMs)");
constexpr bool Int4ShuffledPieceVariant(int variant) {
  return variant >= kInt4ShuffledPieceVariantBase &&
         variant <= kInt4ShuffledPieceVariantBase + kInt4ShuffledPieceConfigs;
}
// Variant -2 (PYQUANT_INT4_SHUF_VARIANT=-2): the default dispatch without the wide kernel whatever
// kInt4ShuffledWideMinM says (the register mma kernel below the Hopper GEMM), for benchmarks. To
// measure the wide kernel above the GEMM's start, set PYQUANT_INT4_SM90_MIN_M.
// Off: as measured on an H100 the wide kernel is 2-4x slower than the register kernel and the
// Hopper GEMM at every M (bench/results/2026-11-24-h100-s10-wide2-bench-cuda.md, column
// pyquant_int4 of that run = the wide kernel for 2 <= M <= 128; pyquant_int4_nowide = this
// dispatch), and 1.4-2x slower with 3 CTAs per SM (…-s11-widefill-bench-cuda.md): it is
// issue-bound on too few warps (kInt4ShuffledWideFill), not waiting on its scale loads.
constexpr int64_t kInt4ShuffledWideMinM = int64_t{1} << 40;
size_t Int4ShuffledWeightBytes(int64_t n, int64_t k);
cudaError_t ShuffleInt4Weights(const uint8_t* src, int64_t row_bytes, int64_t n, int64_t k, void* dst,
                               cudaStream_t stream);
template <typename T>
cudaError_t LaunchMatMulInt4Shuffled(const MatMulInt4Problem& p, cudaStream_t stream, PdlMode pdl = {},
                                     const Int4ShufKnobs& knobs = {});
template <typename T>
cudaError_t LaunchMatMulInt4ShuffledRef(const MatMulInt4Problem& p, cudaStream_t stream);

// True when PYQUANT_CUDA_KERNELS=ref is set in the environment (read once per kernel creation).
bool CudaForceReferenceKernels();
// PYQUANT_INT4_TILED_MIN_M if set, else kInt4TiledMinM.
int64_t CudaInt4TiledMinM();
// PYQUANT_INT4_SM90_MIN_M if set, else kInt4Sm90MinM (a huge value disables the sm90 GEMM).
int64_t CudaInt4Sm90MinM();
// PYQUANT_INT4_SM90_TILE: auto | c1 | c2m | k128 | p128 | p256 | p64 | shuf | coop (or the index),
// the Hopper GEMM benchmark variant (int4_gemm_sm90_variants.cu; shuf: the shuffled weight copy,
// int4_gemm_sm90_shuffled.cu; coop: the default tiles without the ping-pong rule,
// sm90::kInt4Sm90TileCooperative).
int CudaInt4Sm90Tile();
// The Hopper GEMM's environment knobs (tile variant, scheduler) on top of `base`'s other fields.
Int4Sm90Prepared CudaInt4Sm90Knobs(Int4Sm90Prepared base);
// PYQUANT_INT4_GEMV_VARIANT if set to a valid variant index, else -1 (benchmarks).
int CudaInt4GemvVariant();
// PYQUANT_INT4_MID_VARIANT if set, else -1 (benchmarks): the 9 <= M <= 64 kernel variant.
int CudaInt4MidVariant();
// PYQUANT_INT4_MID_ROWS (32 | 64) if set, else 0 (benchmarks): LaunchMatMulInt4's mid_rows.
int CudaInt4MidRows();

}  // namespace pyquant
