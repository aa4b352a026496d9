// MatMulInt4 CUDA kernels and launchers.
//
// matmul_int4_ref_kernel: the plain reference (one thread per output, float32 accumulation,
//   reads the documented layout directly). Correct for every shape, type and block size; the
//   ground truth the fast kernels are tested against, and the path for what they do not cover
//   (float32 X, block size 16, K % 8 != 0, misaligned pointers).
//
// The fast kernels use tensor cores (mma.sync m16n8k16, fp16/bf16 in, fp32 accumulators) with
// the weights decoded in registers straight from B's layout (no second copy of the weights):
//
//   One thread loads 16 bytes of one B row = 32 consecutive codes k = kb .. kb + 31, with
//   kb = chunk * 128 + 32 * t (t = lane % 4, row = lane / 4 of the n8 tile). Four lanes cover a
//   128-wide K chunk. The MMA sums over k in any order, so the k <-> fragment-slot mapping is ours
//   to choose: in MMA step s (0..7) thread t's slots {2t, 2t+1} hold k = kb + 4s + {0, 1} and
//   slots {2t+8, 2t+9} hold kb + 4s + {2, 3}. A (X) uses the same mapping, so thread t reads
//   X[row][kb .. kb+31]: four 16-byte loads per row, no shuffles. Since kb is a multiple of 32
//   and block_size >= 32, a thread's 32 codes share one scale and zero point.
//
// int4_smallm_kernel (M < tiled_min_m, decode / GEMV / small batches): a CTA = NT n8 column
//   tiles x 16 * MT rows (MT = 1, 2, 4 m16 tiles; padded rows are zero; grid.y covers the rest of
//   M); the CTA's warps split K (intra-CTA split-K, summed through shared memory; mid variant 10
//   also splits it over sm_90 clusters of CTAs, for narrow layers), with U chunks
//   of weights per column tile in flight per thread (in registers). X comes straight from global
//   memory (L1/L2-resident: every CTA reads the same few rows) and is reused for the NT tiles.
//   The ring kernel (matmul_int4_ring_impl.cu) is the same mapping with the weights streamed
//   through shared memory (cp.async), the default on wide layers with short rows.
// int4_tiled_kernel (matmul_int4_tiled_impl.cu; M >= tiled_min_m = 65 by default, prefill): 64 x 128 CTA tile, 4 warps of 64 x 32; X tiles in shared
//   memory (cp.async, double-buffered, XOR-swizzled against bank conflicts); each warp decodes
//   its weights once per chunk and reuses them for the 4 m16 tiles; split-K over grid.z when
//   M x N gives fewer than ~2 CTAs per SM.
//
// Measured on an H100 (bench/results/2026-11-22-h100-bench-cuda.md): M <= 16 beats ORT's
// MatMulNBits from M = 4 on (2.2x at M = 16) but reaches only ~33-41 % of the HBM floor at M = 1;
// the tiled kernel runs at ~170 TFLOP/s at M = 4096, 3-4x behind cuBLAS fp16: a wgmma / CUTLASS
// mixed-input mainloop is the missing piece for prefill.
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <type_traits>

#include "cuda/device_info.h"
#include "cuda/matmul_int4.h"
#include "cuda/matmul_int4_impl.cuh"
#include "cuda/matmul_int4_staged.h"
#include "cuda/matmul_int4_tiled.h"
#if PYQUANT_WITH_SM90
#include "cuda/sm90/int4_gemm_sm90.h"
#endif

namespace pyquant {

using cuda_detail::LoadF;
using cuda_detail::StoreT;

// x      [M, K]  T
// b      [N, n_blocks, block_size/2] uint8 (row n at b + n * row_bytes)
// scales [N, n_blocks] T
// zp     [N, ceil(n_blocks/2)] uint8 or nullptr (= 8)
// bias   [N] T or nullptr
// y      [M, N]  T
template <typename T>
__global__ void matmul_int4_ref_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b,
                                       const T* __restrict__ scales, const uint8_t* __restrict__ zp,
                                       const T* __restrict__ bias, T* __restrict__ y, int64_t m, int64_t n, int64_t k,
                                       int64_t block_size) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t row = blockIdx.y;
  if (col >= n || row >= m) return;
  const int64_t nb = Int4NumBlocks(k, block_size);
  const uint8_t* codes = b + col * Int4RowBytes(k, block_size);
  const uint8_t* zp_row = zp ? zp + col * Int4ZeroPointRowBytes(k, block_size) : nullptr;
  const T* xr = x + row * k;
  float acc = 0.0f;
  for (int64_t blk = 0; blk < nb; ++blk) {
    const float s = LoadF(scales, col * nb + blk);
    const float z = zp_row ? float(Int4ZeroPointAt(zp_row, blk)) : float(kInt4SymmetricZeroPoint);
    const int64_t k0 = blk * block_size;
    const int64_t k1 = min(k, k0 + block_size);
    float part = 0.0f;
    for (int64_t kk = k0; kk < k1; ++kk) part += LoadF(xr, kk) * (float(Int4CodeAt(codes, kk)) - z);
    acc += part * s;
  }
  if (bias) acc += LoadF(bias, col);
  y[row * n + col] = StoreT<T>(acc);
}

namespace {

using namespace cuda_detail;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Small / mid M. grid = (ceil(N / (8 * NT)), ceil(M / (16 * MT))), block = 32 * kWarps.
//   x [M, K] T, b/scales/zp as above, bias [N] T or nullptr, y [M, N] T.
// The CTA owns NT n8 column tiles (8 * NT consecutive B rows) and MT m16 tiles. Warp w handles
// chunk groups of U chunks (w, w + kWarps, ... interleaved) of the K range for all of them;
// partial sums meet in shared memory. The weight loads of a group are all issued before its
// first MMA (U * NT * 16 bytes in flight per thread); with kPrefetch the next group's loads are
// issued before the current group's MMAs, so HBM streams while the tensor cores work (without
// it every warp of an SM loads, then waits, then computes, in step: measured 33-41 % of the HBM
// floor at M = 1, bench/results/2026-11-22-h100-notes.md). X is read per 16-byte piece right
// before its MMAs (L1 hits: every CTA reads the same rows) and reused for the NT column tiles.
// kHi = false when M <= 8: rows g + 8 of the single m16 tile are never valid, so neither loaded
// nor kept. (Staging X in shared memory first was tried for M <= 8 and measured slower: 10.2 vs
// 8.8 us at 4096 x 4096, bench/results/2026-11-22-h100-bench-cuda-smemx-experiment.md.)
//
// Why NT > 1 from M = 9 on: a warp's X loads (rows g and g + 8 of each m16 tile, 64 bytes apart
// per lane t) touch 16 L1 lines per instruction, 128 L1 wavefronts per m16 tile and chunk, while
// its weights for one n8 tile are 512 bytes. With NT = 1 at M = 16 that caps the weight stream
// near 4 bytes per SM cycle (the HBM rate needs ~11), which is the ~24 % of the floor measured
// at M = 16 before; NT column tiles reuse each X fragment NT times.
// ---------------------------------------------------------------------------------------------
// kS > 1 (sm_90, mid variant 10): clusters of kS CTAs along grid.x split the K range of one
// output tile (grid.x = tiles * kS; rank = blockIdx.x % kS): worker (warp, rank) takes the
// chunk groups worker, worker + kWarps * kS, ...; Int4ReduceStore adds the ranks' sums in rank
// order. For layers whose N (and M) give fewer CTAs than SMs: N = 512 is 16 tiles of 32 columns.
template <typename T, int MT, int kWarps, int U, bool kHi, bool kPrefetch, int kMinBlocks, int NT = 1, int kS = 1>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks)
    int4_smallm_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b, const T* __restrict__ scales,
                       const uint8_t* __restrict__ zp, const T* __restrict__ bias, T* __restrict__ y, Int4Geom g,
                       bool weights_early) {
  constexpr int kWorkers = kWarps * kS;  // chunk-group workers of one output tile (kS: ReduceMmaTiles checks)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gr = lane >> 2, t = lane & 3;
  const int rank = kS > 1 ? static_cast<int>(blockIdx.x % kS) : 0;
  const int tile = blockIdx.x / kS;
  const int worker = warp * kS + rank;
  const int col0 = tile * 8 * NT + gr;  // this thread's B row (column of Y) in tile j: col0 + 8 j
  const int m0 = blockIdx.y * 16 * MT;
  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

  const int iters = (g.n_chunks + U * kWorkers - 1) / (U * kWorkers);
  auto load_group = [&](int it, WeightFrag<T>(&wf)[U][NT]) {
    const int c0 = it * U * kWorkers + worker;
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
      const int c = c0 + uu * kWorkers;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        wf[uu][j] = LoadWeightFrag<T>(b, scales, zp, g, c < g.n_chunks ? col0 + 8 * j : g.n, c * 128 + 32 * t);
      }
    }
  };
  auto compute_group = [&](int it, const WeightFrag<T>(&wf)[U][NT]) {
    const int c0 = it * U * kWorkers + worker;
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
      const int c = c0 + uu * kWorkers;
      if (c >= g.n_chunks) break;  // warp-uniform
      Int4ChunkMma<T, MT, NT, kHi>(acc, x, g, m0, gr, c * 128 + 32 * t, wf[uu]);
    }
  };

  // PDL (cuda/pdl.h): the first weight group is in flight while the previous grid drains.
  PdlAllowDependents();
  if (!weights_early) PdlWaitPrimary();
  WeightFrag<T> wf[U][NT];
  load_group(0, wf);
  if (weights_early) PdlWaitPrimary();
  for (int it = 0; it < iters; ++it) {
    if constexpr (kPrefetch) {
      WeightFrag<T> wn[U][NT];
      if (it + 1 < iters) load_group(it + 1, wn);  // in flight during this group's MMAs
      compute_group(it, wf);
#pragma unroll
      for (int uu = 0; uu < U; ++uu)
#pragma unroll
        for (int j = 0; j < NT; ++j) wf[uu][j] = wn[uu][j];
    } else {
      if (it > 0) load_group(it, wf);
      compute_group(it, wf);
    }
  }

  // Sum the warps' partial tiles (shared memory: kWarps * MT * 2 KB) and, with kS > 1, the
  // cluster's (NT * MT * 2 KB more), and store.
  __shared__ float red[kWarps][MT * 4][32];
  __shared__ float part[kS > 1 ? NT * MT * 4 * 32 : 1];
  Int4ReduceStore<T, MT, NT, kWarps, kS>(acc, red, bias, y, g, m0, tile * 8 * NT, part, rank);
}

// ---------------------------------------------------------------------------------------------
// M <= 8 (decode): which kernel and variant serves it. PYQUANT_INT4_GEMV_VARIANT=<index> (read
// at kernel creation) pins one for benchmarks; else GemvVariantFor chooses.
//   0..5: int4_smallm_kernel (mma.sync) with (warps per CTA, chunks per group, prefetch):
//     0: 4 warps, U = 8, no prefetch (the first version)
//     1: 4 warps, U = 4, prefetch          2: 2 warps, U = 4, prefetch
//     3: 8 warps, U = 2, prefetch          4: 1 warp,  U = 4, prefetch
//     5: 2 warps, U = 2, prefetch, >= 8 CTAs per SM (register cap)
//   6..11: the CUDA-core GEMV (matmul_int4_gemv_impl.cu) variants 0..5, for M <= 4 and K % 32 == 0
//     (a pinned 6..11 on another problem falls back to the default choice)
// ---------------------------------------------------------------------------------------------
namespace {
constexpr int kSmallMVariants = 6;
constexpr int kGemvVariants = kSmallMVariants + kInt4GemvCcVariants;

bool GemvCcFits(const MatMulInt4Problem& p) { return p.m <= kInt4GemvCcMaxM && p.attrs.k % 32 == 0; }

// Default: the CUDA-core GEMV where it fits up to M = kInt4GemvCcDefaultMaxM, else small-M variant 1 (4 warps, U = 4, prefetch:
// best or within 5 % of the best mma.sync variant on every shape of
// bench/results/2026-11-22-h100-bench-int4-gemv-variants*.md, M = 1..8).
int GemvVariantFor(const MatMulInt4Problem& p, int requested) {
  const bool cc_ok = GemvCcFits(p);
  if (requested >= 0 && requested < kSmallMVariants) return requested;
  if (requested >= kSmallMVariants && requested < kGemvVariants && cc_ok) return requested;
  if (!cc_ok || p.m > kInt4GemvCcDefaultMaxM) return 1;
  // Up to 2 pieces per thread (K <= 8192), loading the next piece only where there is one is
  // faster (H100: 13.6 vs 15.3 us at M = 1 on 4096 x 14336); with more it is slower (15.5 vs 13.6
  // on 14336 x 4096): bench/results/2026-11-22-h100-s3-gemv3-bench-cuda.md.
  const bool short_k = p.attrs.k / 32 <= 2 * 128;
  if (p.m <= 2 && short_k) return kSmallMVariants + 4;
  // M = 4 (with PDL, H100, bench/results/2026-11-22-h100-s4-pdl-variants-bench-cuda.md): variant 0
  // beats the mma.sync kernel on long rows (14336 x 4096: 23.3 vs 28.8 us; 8192 x 8192: 26.9 vs
  // 28.2), loses on K = 4096 (4096 x 14336: 28.1 vs 24.1).
  if (p.m == 4) return p.attrs.k >= 8192 ? kSmallMVariants : 1;
  return p.m == 1 ? kSmallMVariants : kSmallMVariants + 2;
}

// Launches one int4_smallm_kernel instance on its grid: ceil(N / (8 NT)) x ceil(M / (16 MT))
// CTAs of 32 kWarps threads (launch errors are left for the caller's cudaGetLastError()).
template <typename T, int MT, int kWarps, int U, bool kHi, bool kPrefetch, int kMinBlocks, int NT = 1, int kS = 1>
void LaunchSmallM(const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y, const Int4Geom& g,
                  PdlMode pdl, cudaStream_t stream) {
  dim3 grid = SmallMGrid(g, NT, MT);
  grid.x *= kS;  // kS > 1: clusters of kS CTAs per output tile
  (void)LaunchWithPdlCluster(int4_smallm_kernel<T, MT, kWarps, U, kHi, kPrefetch, kMinBlocks, NT, kS>, grid,
                             dim3(32 * kWarps), 0, kS, stream, pdl.launch, x, b, s, zp, bias, y, g, pdl.weights_early);
}

template <typename T>
void LaunchGemvVariant(int v, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y,
                       const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  if (v >= kSmallMVariants) {
    if constexpr (!std::is_same<T, float>::value) {
      LaunchInt4GemvCc<T>(v - kSmallMVariants, x, b, s, zp, bias, y, g, pdl, stream);
    }
    return;
  }
  switch (v) {
    case 1: LaunchSmallM<T, 1, 4, 4, false, true, 1>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 2: LaunchSmallM<T, 1, 2, 4, false, true, 1>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 3: LaunchSmallM<T, 1, 8, 2, false, true, 1>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 4: LaunchSmallM<T, 1, 1, 4, false, true, 1>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 5: LaunchSmallM<T, 1, 2, 2, false, true, 8>(x, b, s, zp, bias, y, g, pdl, stream); break;
    default: LaunchSmallM<T, 1, 4, 8, false, false, 1>(x, b, s, zp, bias, y, g, pdl, stream);
  }
}

// 9 <= M <= 64: int4_smallm_kernel with MT = 1, 2, 4 m16 tiles per CTA row (M <= 16, 32, 64).
// PYQUANT_INT4_MID_VARIANT=<index> (read at kernel creation) pins one for benchmarks (then also
// for M = 5..8, MT = 1); else MidVariantFor chooses. (column tiles NT, warps, chunks per group U, prefetch):
//   0: NT 1, 4 warps, U 8 (4 when MT = 4), no prefetch (the first version)
//   1: NT 2, 4 warps, U 4 (MT 4: 2), prefetch
//   2: NT 4, 4 warps, U 2, prefetch (MT 4: none)
//   3: NT 4, 8 warps, U 1, prefetch (MT 4: none)
//   4: NT 8, 4 warps, U 1, no prefetch (MT 4: NT 2, 8 warps, U 1, prefetch)
//   5..8: the ring kernel (matmul_int4_ring_impl.cu: weights through a per-warp cp.async ring in
//     shared memory) variants 0..3
//   9: NT 4, 16 warps, U 1, prefetch (MT 2: none; MT 4: NT 1, none): variant 3 with twice the warps
//     per SM (variant 3 at M = 16 on 4096^2 is latency-bound: …-s6-ncu-int4-m16.txt)
//   10: variant 3 in sm_90 clusters of kS = 2 / 4 / 8 CTAs splitting K (ClusterKSplitFor): narrow layers
//   11..13: the staged kernel (matmul_int4_staged_impl.cu: X and the weights through a cp.async
//     pipeline in shared memory) with CTA shape kInt4StagedAuto / Wide / Tall; where it does not
//     apply (block_size < 64, K not a whole number of its stages) variant 3 runs instead
constexpr int kMidRingFirst = 5;
constexpr int kMid16Warps = kMidRingFirst + kInt4RingVariants;  // 9
constexpr int kMidKSplit = kMid16Warps + 1;                     // 10
constexpr int kMidStagedFirst = kMidKSplit + 1;                 // 11, 12, 13
constexpr int kMidVariants = kMidStagedFirst + 3;

// Default (H100, bench/results/2026-11-22-h100-s6-{mid,ring,mid9}-bench-cuda.md): the ring kernel
// (variant 5) on wide layers with short rows up to M = 16 (4096 x 14336, K x N: 21.8 / 22.2 / 23.5
// us at M = 5 / 8 / 16 vs 24.5 / 27.7 / 29.4 before); else variant 9 up to M = 32 (M = 16: 8.9 /
// 25.2 / 30.2 us on 4096^2, 14336 x 4096, 8192^2 vs 10.0 / 31.4 / 35.9 for variant 3) and variant
// 3 above (4096^2 at M = 48: 19.0 us; variant 9 spills there, 45.8).
bool WideShortRows(const MatMulInt4Problem& p) { return p.attrs.k <= 4096 && p.attrs.n >= 8192; }

// Narrow layers (s18): variant 10 at M = 5..64 (also before the Hopper GEMM) where variant 3 has <= SMs / 8
// CTAs (N <= 512 on an H100). H100, M = 8 / 16 / 32 (…-s18-narrow-default-bench-cuda.md): 14336 x 512 12.9 /
// 13.8 / 17.7 us vs 17.9 / 21.8 / 27.7 without (GEMV at M = 8, else variant 9); slower at N = 1024 (M = 16,
// 8192 x 1024: 14.7 vs 13.4, …-s18-ksplit-narrow-bench-cuda.md) (NarrowRule::kKSplit below).
// kInt4MidNoKSplit ("nosplit"): without it, nor the kTwoRows rule.
// Variant 10's cluster size kS at M tile MT: ClusterKSplitFor over variant 3's CTAs (NT 4, 8 warps).
int MidKSplitFor(const Int4Geom& g, int mt) {
  const dim3 grid = SmallMGrid(g, 4, mt);
  return ClusterKSplitFor(int64_t(grid.x) * grid.y, g.n_chunks, 8);
}
// Layers a little wider (s19, kTwoRows): N <= SMs / 4 * 32 (1024 on an H100), K >= 4096, no K split. At 33 <= M <= 64
// variant 3's one row of MT = 4 tiles is N / 32 CTAs, each re-reading all of X; variant 9 in two rows of
// MT = 2 is twice the CTAs of twice the warps, and also replaces the Hopper GEMM there (M = 49..64).
// H100, M = 33 / 64 (bench/results/2026-11-25-h100-s19-mid-rows-bench-cuda.md, column mid9r32):
// 4096 x 1024 9.1 / 9.2 us vs 17.4 / 20.3; 8192 x 1024 16.1 / 16.9 vs 31.7 / 31.7; 14336 x 1024 26.6 /
// 27.4 vs 52.5 / 36.4 (torch fp16 8.7 / 11.2 / 15.8). Not on N <= 512 (variant 10 is faster there) nor
// on 4096^2 (no faster: 18.5 / 19.8 vs 17.9 / 21.0).
enum class NarrowRule { kNone, kKSplit, kTwoRows };

// Which narrow-layer rule a layer falls under, from variant 3's grid at MT = 4 (one grid row).
NarrowRule NarrowRuleFor(const MatMulInt4Problem& p) {
  const Int4Geom g = MakeInt4Geom(std::min<int64_t>(p.m, 64), p.attrs);
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return NarrowRule::kNone;
  const int64_t ctas = SmallMGrid(g, 4, 4).x, sms = CudaSmCount(dev);
  if (ctas * 8 <= sms && MidKSplitFor(g, 4) > 1) return NarrowRule::kKSplit;
  if (ctas * 4 <= sms && g.n_chunks >= 32) return NarrowRule::kTwoRows;
  return NarrowRule::kNone;
}

// The default choice is asked for: -1, or kInt4MidNoStaged (the same without the staged kernel).
bool MidDefault(int requested) { return requested == -1 || requested == kInt4MidNoStaged; }

bool MidKSplitByDefault(const MatMulInt4Problem& p, int requested) {
  return MidDefault(requested) && p.m >= 5 && p.m <= 64 && NarrowRuleFor(p) == NarrowRule::kKSplit;
}

// The staged kernel by default (s20; H100, bench/results/2026-11-25-h100-s20-staged-{narrow,square}-bench-cuda.md,
// µs at M = 5 / 16 / 32 / 64 against the s19 default, torch fp16 in brackets), sm_90 only (measured there):
//   * kTwoRows layers (N ~ 1024) up to M = 32, and at 33..64 where K >= 8192: 8192 x 1024 7.3 / 8.1 / 9.6 /
//     14.8 vs 10.9 / 13.4 / 16.9 / 16.7 (10.7 / 10.9 / 11.0 / 10.9); 14336 x 1024 10.8 / 12.1 / 13.3 / 21.0
//     vs 18.7 / 21.9 / 28.1 / 27.3 (14.7-15.9); 4096 x 1024 4.8 / 5.4 / 6.6 vs 5.8 / 7.7 / 9.1 (8.1-8.4),
//     but at M = 48 / 64 9.8 / 9.9 vs 9.0 / 9.2 (two-row variant 9 stays there);
//   * kKSplit layers (N <= 512) where K >= 8192 or M > 16: 14336 x 512 9.5 / 10.4 / 10.7 / 13.7 vs 13.0 /
//     13.9 / 17.7 / 26.8 (10.1-10.8); 4096 x 512 at M = 32 / 64 5.2 / 7.2 vs 6.2 / 8.8, but at M = 5 / 16
//     4.5 / 5.1 vs 4.3 / 5.0 (variant 10 stays there);
//   * other row-major layers with K >= 8192 at M = 5..8: 14336 x 4096 24.1 / 24.2 vs 28.3 / 30.6 at M = 5 / 8
//     (slower at 16: 26.4 vs 25.2; 4096^2 slower at every M).
// Only where the kernel applies (block_size >= 64, whole stages of K, B rows unpadded).
bool StagedByDefault(const MatMulInt4Problem& p, int requested) {
  if (requested != -1 || p.m < 5 || p.m > 64 || !CurrentDeviceIsSm90()) return false;
  const Int4Geom g = MakeInt4Geom(p.m, p.attrs);
  if (g.row_bytes != g.k / 2 || !PlanInt4Staged(kInt4StagedAuto, g).ok) return false;
  const bool long_k = p.attrs.k >= 8192;
  switch (NarrowRuleFor(p)) {
    case NarrowRule::kKSplit: return long_k || p.m > 16;
    case NarrowRule::kTwoRows: return long_k || p.m <= 32;
    default: return long_k && p.m <= 8;
  }
}

// M rows per CTA of the mid kernel at 33 <= M <= 64: 32 (MT = 2, two grid rows) or 64 (MT = 4, one).
int MidRowsFor(const MatMulInt4Problem& p, int requested_variant, int requested_rows) {
  if (requested_rows == 32 || requested_rows == 64) return requested_rows;
  return MidDefault(requested_variant) && NarrowRuleFor(p) == NarrowRule::kTwoRows ? 32 : 64;
}

int MidVariantFor(const MatMulInt4Problem& p, int requested, int rows = 64) {
  if (requested >= 0 && requested < kMidVariants) return requested;
  if (StagedByDefault(p, requested)) return kMidStagedFirst;
  if (MidKSplitByDefault(p, requested)) return kMidKSplit;
  if (WideShortRows(p) && p.m <= 16) return kMidRingFirst;
  return p.m <= 32 || rows == 32 ? kMid16Warps : 3;
}

// staged: the staged kernel's caps on tokens per CTA and cluster size (PlanInt4Staged).
template <typename T, int MT>
void LaunchMidVariant(int v, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y,
                      const Int4Geom& g, PdlMode pdl, cudaStream_t stream, Int4StagedLimits staged) {
  if (v >= kMidRingFirst && v < kMidRingFirst + kInt4RingVariants) {
    LaunchInt4Ring<T>(v - kMidRingFirst, MT, x, b, s, zp, bias, y, g, pdl, stream);
    return;
  }
  if (v >= kMidStagedFirst && v < kMidVariants) {
    // its tiles follow M itself (grid.y covers the rest) up to staged.max_tokens, not MT
    if (LaunchInt4Staged<T>(v - kMidStagedFirst, staged, x, b, s, zp, bias, y, g, pdl, stream) !=
        cudaErrorNotSupported) {
      return;
    }
    v = 3;
  }
  // MT = 4 keeps 64 accumulators per column pair: fewer weight fragments in flight there, so
  // that nothing spills (ptxas -v), except variant 9 at MT = 2 / 4 (32-40 bytes at its
  // 128-register cap).
  constexpr bool kBig = MT == 4;
  switch (v) {
    case 1: LaunchSmallM<T, MT, 4, (kBig ? 2 : 4), true, true, 1, 2>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 2: LaunchSmallM<T, MT, 4, 2, true, !kBig, 1, 4>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 3: LaunchSmallM<T, MT, 8, 1, true, !kBig, 1, 4>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case kMidKSplit:
      switch (MidKSplitFor(g, MT)) {
        case 8: LaunchSmallM<T, MT, 8, 1, true, !kBig, 1, 4, 8>(x, b, s, zp, bias, y, g, pdl, stream); break;
        case 4: LaunchSmallM<T, MT, 8, 1, true, !kBig, 1, 4, 4>(x, b, s, zp, bias, y, g, pdl, stream); break;
        case 2: LaunchSmallM<T, MT, 8, 1, true, !kBig, 1, 4, 2>(x, b, s, zp, bias, y, g, pdl, stream); break;
        default: LaunchSmallM<T, MT, 8, 1, true, !kBig, 1, 4>(x, b, s, zp, bias, y, g, pdl, stream);
      }
      break;
    case kMid16Warps:  // <= 128 registers per thread; MT 2 with prefetch spilled more
      LaunchSmallM<T, MT, 16, 1, true, MT == 1, 1, (kBig ? 1 : 4)>(x, b, s, zp, bias, y, g, pdl, stream);
      break;
    case 4:  // MT 4: 128 accumulators for NT 8 would spill
      if constexpr (kBig) {
        LaunchSmallM<T, MT, 8, 1, true, true, 1, 2>(x, b, s, zp, bias, y, g, pdl, stream);
      } else {
        LaunchSmallM<T, MT, 4, 1, true, false, 1, 8>(x, b, s, zp, bias, y, g, pdl, stream);
      }
      break;
    default: LaunchSmallM<T, MT, 4, (kBig ? 4 : 8), true, false, 1>(x, b, s, zp, bias, y, g, pdl, stream);
  }
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------------------------

template <typename T>
cudaError_t LaunchMatMulInt4Ref(const MatMulInt4Problem& p, cudaStream_t stream) {
  if (p.m == 0) return cudaSuccess;
  if (p.m > 65535) return cudaErrorInvalidConfiguration;
  const int threads = 128;
  dim3 grid(static_cast<unsigned>((p.attrs.n + threads - 1) / threads), static_cast<unsigned>(p.m));
  matmul_int4_ref_kernel<T><<<grid, threads, 0, stream>>>(
      static_cast<const T*>(p.x), p.b, static_cast<const T*>(p.scales), p.zero_points, static_cast<const T*>(p.bias),
      static_cast<T*>(p.y), p.m, p.attrs.n, p.attrs.k, p.attrs.block_size);
  return cudaGetLastError();
}

namespace {

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Which fast kernel serves a problem, or none (-> reference kernel).
enum class Int4Path { kRef, kSmallM8, kSmallM16, kSmallM32, kSmallM64, kTiled, kSm90 };

#if PYQUANT_WITH_SM90
template <typename T>
sm90::Int4GemmArgs Sm90Args(const MatMulInt4Problem& p, const Int4Sm90Prepared* sm90) {
  sm90::Int4GemmArgs a;
  a.x = p.x;
  a.b = p.b;
  a.scales_t = sm90 ? sm90->scales_t : nullptr;
  a.zeros_t = sm90 ? sm90->zeros_t : nullptr;
  a.bias = p.bias;
  a.y = p.y;
  a.m = static_cast<int>(p.m);
  a.n = static_cast<int>(p.attrs.n);
  a.k = static_cast<int>(p.attrs.k);
  a.block_size = static_cast<int>(p.attrs.block_size);
  a.row_bytes = static_cast<int>(Int4RowBytes(p.attrs.k, p.attrs.block_size));
  cudaGetDevice(&a.device);
  a.variant = sm90 ? sm90->tile_variant : 0;
  if (sm90) {
    a.b_shuffled = static_cast<const uint8_t*>(sm90->b_shuffled);
    a.sched = sm90->sched;
    // auto: CUTLASS's stream-K heuristic, or data-parallel on short K loops (Int4GemmArgs).
    if (sm90->decomposition_auto) a.sched.decomposition = 0;
    a.decomposition_auto = sm90->decomposition_auto;
  }
  return a;
}
#endif

// The shape / type part of the sm90 decision (pointers aside).
template <typename T>
bool Sm90ShapeOk(const MatMulInt4Problem& p) {
#if PYQUANT_WITH_SM90
  if constexpr (std::is_same<T, float>::value) {
    return false;
  } else {
    const auto& a = p.attrs;
    const bool block_ok = a.block_size == 64 || a.block_size == 128 || a.block_size == 256;
    return block_ok && a.k % 32 == 0 && a.n % 8 == 0 && p.m < (int64_t{1} << 31) && CurrentDeviceIsSm90();
  }
#else
  (void)p;
  return false;
#endif
}

// Narrow layers above M = 64 (session 23): the staged kernel in grid rows of 64 tokens. The Hopper GEMM
// (128-channel tiles, data-parallel: N / 128 CTAs) and the tiled kernel leave most SMs idle there, but
// each row of 64 tokens costs the staged kernel about as much as M = 64 does, so it stops where the
// GEMM's larger tiles win back. H200, µs, staged / before / torch fp16
// (bench/results/2026-11-26-h200-s23-above64-narrow-bench-cuda.md):
//   K-split layers (N <= 512 here), up to kInt4StagedMaxM: 14336 x 512 at M = 96 / 128 / 256 20.9 / 20.9 /
//   42.1 vs 66.5 / 66.2 / 49.1 (10.8 / 10.4 / 11.5);
//   two-row layers (N ~ 1024), up to kInt4StagedMaxMTwoRows: M = 96 / 128: 8192 x 1024 29.1 / 29.1 vs
//   43.4 / 43.3 (12.2 / 10.6), 14336 x 1024 41.4 / 41.7 vs 49.4 / 49.7, 4096 x 1024 19.1 / 19.2 vs 26.4 /
//   26.8; at 256 slower (44.2 vs 31.8, 63.1 vs 38.3, 29.1 vs 27.9).
// Session 24: the staged split fitted to one wave (staged_split.h) made the two-row layers at
// M = 96 / 128 1.3-1.6x faster (4096 / 8192 / 14336 x 1024: 14.1 / 19.2 / 25.5 µs), and at M = 192
// (three grid rows) the staged kernel now beats the Hopper GEMM where K <= 8192: 4096 x 1024 19.2 vs
// 27.7, 8192 x 1024 29.3 vs 32.0, but 14336 x 1024 42.8 vs 38.5; at 255 it loses on all three
// (bench/results/2026-11-26-h200-s24-final-int4-staged255-bench-cuda.md against …-st256-bench-cuda.md).
// Still 1.5-3x torch fp16 there.
// Default choices only (mid_variant -1); B row-major. staged_max_m: LaunchMatMulInt4's (0 = the rule).
template <typename T>
bool StagedAboveM64(const MatMulInt4Problem& p, int mid_variant, int64_t staged_max_m) {
  if (std::is_same<T, float>::value || mid_variant != -1 || p.m <= 64) return false;
  if (staged_max_m > 0 && p.m > staged_max_m) return false;
  if (!CurrentDeviceIsSm90() || !Aligned16(p.x) || !Aligned16(p.b)) return false;
  const NarrowRule rule = NarrowRuleFor(p);
  if (rule == NarrowRule::kNone) return false;
  if (staged_max_m <= 0) {
    const int64_t two_rows_max = p.attrs.k <= 8192 ? kInt4StagedMaxMTwoRowsShortK : kInt4StagedMaxMTwoRows;
    if (p.m > (rule == NarrowRule::kTwoRows ? two_rows_max : kInt4StagedMaxM)) return false;
  }
  const Int4Geom g = MakeInt4Geom(p.m, p.attrs);
  return g.row_bytes == g.k / 2 && PlanInt4Staged(kInt4StagedAuto, g).ok;
}

// Int4Sm90Prepared::mid_rows_rule (session 31): short rows, M past the small-M range, and the mid
// kernel's grid of 64-token rows within one wave of SMs.
bool MidRowsRule(const MatMulInt4Problem& p) {
  if (p.m < kInt4Sm90MinM || p.attrs.k > kInt4MidRowsMaxK) return false;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  const dim3 grid = SmallMGrid(MakeInt4Geom(p.m, p.attrs), 4, 4);
  return int64_t(grid.x) * grid.y <= CudaSmCount(dev);
}

// The shuffled layers of 2^24 <= N * K < 2^25 where the piece kernel serves the M below
// kInt4Sm90MinMShuffledSquare (matmul_int4.h), so the Hopper GEMM starts there.
// (No usable device: 0 SMs, false.)
bool PieceUpToSquareMinM(const MatMulInt4Attrs& a) {
  return Int4ShuffledPieceByDefault(a.n, a.k, kInt4Sm90MinMShuffledSquare - 1, CurrentDeviceSmCount());
}

template <typename T>
Int4Path ChooseInt4Path(const MatMulInt4Problem& p, int64_t tiled_min_m, const Int4Sm90Prepared* sm90 = nullptr) {
  if constexpr (std::is_same<T, float>::value) {
    return Int4Path::kRef;  // float32 X: no fp32 tensor-core path (yet)
  } else {
    const auto& a = p.attrs;
    bool mid_rows = false;  // Int4Sm90Prepared::mid_rows_rule
#if PYQUANT_WITH_SM90
    // (a pinned PYQUANT_INT4_SM90_MIN_M sets every one of these fields: matmul_int4_op.cc)
    const int64_t sm90_min_m =
        sm90 == nullptr                       ? 0
        : a.n * a.k >= kInt4ShuffleMinWeights ? std::min(sm90->min_m, sm90->min_m_large)
        : sm90->b_in_place && Int4ShuffleByDefault(a.n, a.k)
            ? (PieceUpToSquareMinM(a) ? sm90->min_m_shuffled_square : std::min(sm90->min_m, sm90->min_m_shuffled_wide))
            : sm90->min_m;
    const bool narrow_mid = sm90 != nullptr && sm90->narrow_rules && !sm90->b_in_place && p.m <= 64 &&
                            p.m >= sm90_min_m && Aligned16(p.x) && Aligned16(p.b) &&
                            NarrowRuleFor(p) != NarrowRule::kNone;
    mid_rows = sm90 != nullptr && sm90->mid_rows_rule && !sm90->b_in_place && MidRowsRule(p);
    if (sm90 != nullptr && sm90->scales_t != nullptr && p.m >= sm90_min_m && !narrow_mid && !mid_rows &&
        Sm90ShapeOk<T>(p) && sm90::Int4GemmSupported(Sm90Args<T>(p, sm90), std::is_same<T, __nv_bfloat16>::value)) {
      return Int4Path::kSm90;
    }
#endif
    if (a.block_size < 32) return Int4Path::kRef;  // a thread's 32 codes must share one scale
    if (a.k % 8 != 0) return Int4Path::kRef;       // 16-byte rows of X
    if (!Aligned16(p.x) || !Aligned16(p.b)) return Int4Path::kRef;
    if (p.m * a.k >= (int64_t{1} << 31) || p.m * a.n >= (int64_t{1} << 31)) return Int4Path::kRef;
    if (p.m / kInt4TiledRows > 65535) return Int4Path::kRef;
    if (p.m >= tiled_min_m && !mid_rows) return Int4Path::kTiled;
    if (p.m <= 8) return Int4Path::kSmallM8;
    if (p.m <= 16) return Int4Path::kSmallM16;
    if (p.m <= 32) return Int4Path::kSmallM32;
    return Int4Path::kSmallM64;
  }
}

}  // namespace

template <typename T>
size_t MatMulInt4WorkspaceBytes(const MatMulInt4Problem& p, int64_t tiled_min_m, const Int4Sm90Prepared* sm90) {
  if (p.m == 0) return 0;
  const Int4Path path = ChooseInt4Path<T>(p, tiled_min_m, sm90);
#if PYQUANT_WITH_SM90
  if (path == Int4Path::kSm90) {
    return sm90::Int4GemmWorkspaceBytes(Sm90Args<T>(p, sm90), std::is_same<T, __nv_bfloat16>::value);
  }
#endif
  // B in the shuffled order: below the Hopper GEMM the shuffled-order kernels run, which need no
  // scratch (the tiled kernel's split-K sums would be M * N floats per node for nothing).
  if (sm90 != nullptr && sm90->b_in_place) return 0;
  return path == Int4Path::kTiled ? Int4TiledWorkspaceBytes(p) : 0;
}

template <typename T>
cudaError_t LaunchMatMulInt4(const MatMulInt4Problem& p, cudaStream_t stream, int64_t tiled_min_m, Int4Workspace ws,
                             const Int4Sm90Prepared* sm90, int gemv_variant, PdlMode pdl, int mid_variant, int mid_rows,
                             StagedSplitLimits staged_split, int64_t staged_max_m) {
  if (p.m == 0) return cudaSuccess;
  // B in the shuffled order: only kernels that read it (never the portable ones below).
  const bool shuffled = sm90 != nullptr && sm90->b_in_place;
  if constexpr (!std::is_same<T, float>::value) {
    if (!shuffled && StagedAboveM64<T>(p, mid_variant, staged_max_m)) {
      const cudaError_t e =
          LaunchInt4Staged<T>(kInt4StagedAuto, Int4StagedLimits{0, staged_split}, static_cast<const T*>(p.x), p.b,
                              static_cast<const T*>(p.scales), p.zero_points, static_cast<const T*>(p.bias),
                              static_cast<T*>(p.y), MakeInt4Geom(p.m, p.attrs), pdl, stream);
      if (e != cudaErrorNotSupported) return e;
    }
  }
  Int4Path path = ChooseInt4Path<T>(p, tiled_min_m, sm90);
#if PYQUANT_WITH_SM90
  if (path == Int4Path::kSm90) {
    sm90::Int4GemmArgs args = Sm90Args<T>(p, sm90);
    args.launch.pdl = pdl.launch;  // CUTLASS waits before its first load (sm90/launch_control.h)
    const bool bf16 = std::is_same<T, __nv_bfloat16>::value;
    const bool gemm_reads_order = !shuffled || sm90::Int4GemmShuffledSupported(args, bf16);
    if (gemm_reads_order && sm90::Int4GemmWorkspaceBytes(args, bf16) <= ws.bytes) {
      return sm90::LaunchInt4Gemm(args, bf16, ws.data, ws.bytes, stream);
    }
    path = ChooseInt4Path<T>(p, tiled_min_m, nullptr);  // not enough scratch: portable kernels
  }
#endif
  if (shuffled) return LaunchMatMulInt4Shuffled<T>(p, stream, pdl, sm90->shuf);
  if (path == Int4Path::kRef) return LaunchMatMulInt4Ref<T>(p, stream);
  if constexpr (!std::is_same<T, float>::value) {
    const auto& a = p.attrs;
    const Int4Geom g = MakeInt4Geom(p.m, a);
    const T* x = static_cast<const T*>(p.x);
    const T* s = static_cast<const T*>(p.scales);
    const T* bias = static_cast<const T*>(p.bias);
    T* y = static_cast<T*>(p.y);
    const Int4StagedLimits staged{0, staged_split};  // tokens per CTA by M
    switch (path) {
      case Int4Path::kSmallM8:
        // A pinned mid variant also serves M = 5..8 (benchmarks); by default the ring kernel does on wide
        // layers with short rows (4096 x 14336: 21.8 / 22.2 us at M = 5 / 8 vs 24.5 / 27.7), variant 10 on
        // narrow ones (MidKSplitByDefault), the staged kernel where StagedByDefault says: every default
        // choice of MidVariantFor at M <= 8 but its fallback, variant 9 (asked once, not rule by rule).
        if (p.m > 4) {
          const int v = MidVariantFor(p, mid_variant);
          if (mid_variant >= 0 || (gemv_variant < 0 && v != kMid16Warps)) {
            LaunchMidVariant<T, 1>(v, x, p.b, s, p.zero_points, bias, y, g, pdl, stream, staged);
            break;
          }
        }
        LaunchGemvVariant<T>(GemvVariantFor(p, gemv_variant), x, p.b, s, p.zero_points, bias, y, g, pdl, stream);
        break;
      case Int4Path::kSmallM16:
        LaunchMidVariant<T, 1>(MidVariantFor(p, mid_variant), x, p.b, s, p.zero_points, bias, y, g, pdl, stream,
                               staged);
        break;
      case Int4Path::kSmallM32:
        LaunchMidVariant<T, 2>(MidVariantFor(p, mid_variant), x, p.b, s, p.zero_points, bias, y, g, pdl, stream,
                               staged);
        break;
      case Int4Path::kSmallM64: {
        const int rows = MidRowsFor(p, mid_variant, mid_rows);
        const int v = MidVariantFor(p, mid_variant, rows);
        // The staged kernel's tokens per CTA: 32 (two grid rows) where PYQUANT_INT4_MID_ROWS=32 asks, and
        // by default on the K-split layers (N <= 512). H100 (…-s21-staged-narrow-bench-cuda.md, r32 against
        // the default's 64): 4096 x 512 at M = 40 / 64: 6.6 / 6.6 vs 7.0 / 7.1 us, 14336 x 512: 13.2 / 13.4
        // vs 13.7 / 13.7. Not on the two-row layers (N = 1024), where 64 stays faster (8192 x 1024:
        // 15.8 vs 14.8 at M = 40): else the tokens follow M (0).
        const bool v_staged = v >= kMidStagedFirst && v < kMidVariants;
        const bool staged_rows32 =
            v_staged &&
            (mid_rows == 32 || (mid_rows == 0 && MidDefault(mid_variant) && NarrowRuleFor(p) == NarrowRule::kKSplit));
        if (rows == 32 || staged_rows32) {
          LaunchMidVariant<T, 2>(v, x, p.b, s, p.zero_points, bias, y, g, pdl, stream,
                                 Int4StagedLimits{staged_rows32 ? 32 : 0, staged_split});
        } else {
          LaunchMidVariant<T, 4>(v, x, p.b, s, p.zero_points, bias, y, g, pdl, stream, staged);
        }
        break;
      }
      default: return LaunchInt4Tiled<T>(p, g, ws.data, ws.bytes, stream);
    }
  }
  return cudaGetLastError();
}

template <typename T>
bool MatMulInt4Sm90Candidate(const MatMulInt4Problem& p) {
  return Sm90ShapeOk<T>(p);
}

#define PYQUANT_INSTANTIATE(T)                                                                                 \
  template cudaError_t LaunchMatMulInt4<T>(const MatMulInt4Problem&, cudaStream_t, int64_t, Int4Workspace,     \
                                           const Int4Sm90Prepared*, int, PdlMode, int, int, StagedSplitLimits, \
                                           int64_t);                                                           \
  template size_t MatMulInt4WorkspaceBytes<T>(const MatMulInt4Problem&, int64_t, const Int4Sm90Prepared*);     \
  template cudaError_t LaunchMatMulInt4Ref<T>(const MatMulInt4Problem&, cudaStream_t);                         \
  template bool MatMulInt4Sm90Candidate<T>(const MatMulInt4Problem&);
PYQUANT_INSTANTIATE(float)
PYQUANT_INSTANTIATE(__half)
PYQUANT_INSTANTIATE(__nv_bfloat16)
#undef PYQUANT_INSTANTIATE

}  // namespace pyquant
