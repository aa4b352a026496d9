// MatMulInt4 CUDA kernels on the shuffled weight order (layout/int4_shuffled.h): every M below the
// Hopper GEMM's range on a node whose B the op rewrote in place (matmul_int4_op.cc), plus the
// rewrite itself and a reference kernel.
//
// Why a second set of kernels: the Hopper GEMM reads B 7-25 % faster in the shuffled order
// (bench/results/2026-11-23-h100-s8-int4-shuf-bench-cuda.md), and a node's memory must stay
// about its packed weights, so the shuffled copy has to replace B rather than sit beside it; then
// decode and small batches must read it too. The order suits them: a 32-bit word is one thread's
// m16n8k16 A fragment, so the mma kernel loads and decodes it with no shuffles, and a 16-byte
// piece is two whole rows over 16 k for the CUDA-core GEMV.
//
// int4_shuffled_gemv_kernel (M <= kInt4ShuffledGemvMaxM; matmul_int4_shuffled_gemv_impl.cu): CUDA
//   cores, one 16-byte piece (rows r0, r1 = r0 + 8, 16 k) per thread and step, the decode GEMV's
//   arithmetic (matmul_int4_gemv_impl.cu: chains of 4 products per 16-bit lane, fp32 across chains,
//   scale per piece, slow path for pieces whose fast sum is not finite).
// int4_shuffled_mma_kernel (the rest): weights as the A operand (16 B rows x k16), X as B (8
//   tokens), fp32 accumulators; a CTA owns NT n16 tiles x 8 MT8 tokens, its warps split K in
//   groups of U k16 steps (one block: U * 16 <= 64 <= block_size), the next group's weights in
//   flight while the current group's MMAs run; partial sums meet in shared memory (fixed order).
// int4_shuffled_ref_kernel: one thread per output, float32, through Int4ShuffledCodeAt: the
//   fallback for misaligned X, and the ground truth of the order in the device tests.
//
// Preconditions (the op checks them before rewriting B): T = __half / __nv_bfloat16, N % 128 == 0,
// K % 64 == 0, block_size in {64, 128, 256}, finite scales with -zp * scale finite in T (the
// Hopper GEMM's own precondition; the slow path still guards the activations).
#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "cuda/device_info.h"
#include "cuda/matmul_int4.h"
#include "cuda/matmul_int4_impl.cuh"
#include "cuda/matmul_int4_shuffled_impl.cuh"
#include "cuda/matmul_int4_staged.h"
#include "cuda/pdl.h"
#include "layout/int4_shuffled.h"

namespace pyquant {

using namespace cuda_detail;

namespace {

// ---------------------------------------------------------------------------------------------
// The in-place rewrite: one thread per source byte of the row-major copy `src` (codes k = 2 kb,
// 2 kb + 1 of row `row`), each code OR-ed into its nibble of the zeroed destination (a 32-bit
// word takes codes of two rows and four bytes: atomicOr).
// ---------------------------------------------------------------------------------------------
__global__ void int4_shuffle_kernel(const uint8_t* __restrict__ src, int row_bytes, int n, int k,
                                    uint32_t* __restrict__ dst) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int half_k = k / 2;
  if (i >= int64_t(n) * half_k) return;
  const int row = static_cast<int>(i / half_k), kb = static_cast<int>(i % half_k);
  const uint32_t byte = src[int64_t(row) * row_bytes + kb];
  for (int j = 0; j < 2; ++j) {
    const int64_t nibble = Int4ShuffledNibble(row, 2 * kb + j, n);
    atomicOr(dst + nibble / 8, ((byte >> (4 * j)) & 0xFu) << (4 * (nibble % 8)));
  }
}

// x [M, K] T, b shuffled [N * K / 2], scales [N, nb] T, zp [N, zp_row_bytes] or nullptr, bias [N]
// or nullptr, y [M, N] T. grid = (ceil(N / 128), M).
template <typename T>
__global__ void int4_shuffled_ref_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b,
                                         const T* __restrict__ scales, const uint8_t* __restrict__ zp,
                                         const T* __restrict__ bias, T* __restrict__ y, Int4Geom g) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t row = blockIdx.y;
  if (col >= g.n) return;
  const int block_size = 1 << g.bs_log2;
  const T* xr = x + row * g.k;
  float acc = 0.0f;
  for (int blk = 0; blk < g.nb; ++blk) {
    const float s = LoadF(scales, int64_t(col) * g.nb + blk);
    const float z =
        zp ? float(Int4ZeroPointAt(zp + int64_t(col) * g.zp_row_bytes, blk)) : float(kInt4SymmetricZeroPoint);
    const int k0 = blk * block_size, k1 = min(g.k, k0 + block_size);
    float part = 0.0f;
    for (int kk = k0; kk < k1; ++kk) part += LoadF(xr, kk) * (float(Int4ShuffledCodeAt(b, col, kk, g.n)) - z);
    acc += part * s;
  }
  if (bias) acc += LoadF(bias, col);
  y[row * g.n + col] = StoreT<T>(acc);
}

__device__ __forceinline__ uint32_t LoadStream4(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// ---------------------------------------------------------------------------------------------
// The mma kernel. grid = (N / (16 NT), ceil(M / (8 MT8))), block = 32 kWarps.
// Thread (warp w, lane = 4 gr + tq): in n16 tile j it owns rows 16 (nt0 + j) + gr and + 8 (its A
// fragment = word tq of piece gr); in token tile i, tokens m0 + 8 i + gr (its B fragment: X at
// k = 2 tq, 2 tq + 1, 2 tq + 8, 2 tq + 9 of the step) and accumulates tokens m0 + 8 i + 2 tq, + 1.
// ---------------------------------------------------------------------------------------------
template <typename T, int NT, int U>
struct ShufGroup {
  uint32_t q[U][NT];  // the lane's word of tile j at step u
  T s[NT][2];         // scales of rows r0, r1 of tile j
  int z[NT][2];       // zero points
};

// Where one warp's loads start, computed once per thread so that the loop adds constants to
// pointers instead of redoing 64-bit index arithmetic per load (session 39: 608 SASS instructions
// per group of 16 tile-steps at M = 16, ~250 of them address arithmetic, in a kernel bound by
// issue latency).
//   b: the lane's word of tile nt0 at k16 step 0; step_bytes: one k16 step of all N (N / 16 tiles);
//   s: scale row 16 nt0 + r (r = lane / 4), row stride nb; zp: its zero-point row or nullptr.
template <typename T>
struct ShufLanePointers {
  const uint8_t* b;
  int64_t step_bytes;
  const T* s;
  const uint8_t* zp;
};

template <typename T>
__device__ __forceinline__ ShufLanePointers<T> MakeShufLanePointers(const uint8_t* __restrict__ b,
                                                                    const T* __restrict__ scales,
                                                                    const uint8_t* __restrict__ zp, const Int4Geom& g,
                                                                    int nt0, int lane) {
  const int64_t row = 16 * int64_t(nt0) + (lane >> 2);
  ShufLanePointers<T> p;
  p.b = b + int64_t(nt0) * kInt4ShuffleTileBytes + 4 * lane;
  p.step_bytes = int64_t(g.n >> 4) * kInt4ShuffleTileBytes;
  p.s = scales + row * g.nb;
  p.zp = zp ? zp + row * g.zp_row_bytes : nullptr;
  return p;
}

// Group grp (U k16 steps from step grp * U) of the lane's NT tiles: bg = the lane's word of tile
// nt0 at the group's first step (lp.b + grp * U * step_bytes, kept by the caller's loop).
template <typename T, int NT, int U>
__device__ __forceinline__ void LoadShufGroup(ShufGroup<T, NT, U>& f, const uint8_t* bg, const ShufLanePointers<T>& lp,
                                              const Int4Geom& g, int grp) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint8_t* bu = bg + u * lp.step_bytes;
#pragma unroll
    for (int j = 0; j < NT; ++j) f.q[u][j] = LoadStream4(bu + j * kInt4ShuffleTileBytes);
  }
  const int blk = (grp * U * 16) >> g.bs_log2;
  const int64_t row8 = 8 * int64_t(g.nb);  // 8 rows of scales
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) f.s[j][h] = __ldg(lp.s + (2 * j + h) * row8 + blk);
  if (lp.zp != nullptr) {
    const int64_t zrow8 = 8 * int64_t(g.zp_row_bytes);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) f.z[j][h] = Int4ZeroPointAt(lp.zp + (2 * j + h) * zrow8, blk);
  } else {
#pragma unroll
    for (int j = 0; j < NT; ++j) f.z[j][0] = f.z[j][1] = kInt4SymmetricZeroPoint;
  }
}

// kXAhead = 1: X's fragments of step s + 1 are loaded while step s's MMAs run (two register sets,
// xs[s % 2]; U even, so a group's first step always uses set 0), instead of right before use;
// 2: two steps ahead (four sets, one per step of a group: U = 4). Tokens >= M then read row M - 1
// unmasked: their accumulators are never stored.
// Occupancy: the 8-warp NT = 4 CTAs at MT8 <= 2 (the default at M = 3-16) are meant to run two
// per SM (<= 128 registers); without the minimum ptxas (nvcc 13.0) gives the fp16 X-ahead MT8 = 2
// instance 130 (one CTA per SM), with it 128 and no spill. Elsewhere no minimum (a minimum of 1
// is not the same as none: session 38).
template <int MT8, int NT, int kWarps>
constexpr int ShufMmaMinCtas() {
  return NT == 4 && kWarps == 8 && MT8 <= 2 ? 2 : 0;
}

template <typename T, int MT8, int NT, int kWarps, int U, int kS, int kXAhead = 0>
__global__ void __launch_bounds__(kWarps * 32, ShufMmaMinCtas<MT8, NT, kWarps>())
    int4_shuffled_mma_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b, const T* __restrict__ scales,
                             const uint8_t* __restrict__ zp, const T* __restrict__ bias, T* __restrict__ y, Int4Geom g,
                             bool weights_early) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gr = lane >> 2, tq = lane & 3;
  const int rank = kS > 1 ? static_cast<int>(blockIdx.x % kS) : 0;  // K slice (cluster rank)
  const int nt0 = (blockIdx.x / kS) * NT;
  const int m0 = blockIdx.y * 8 * MT8;
  const int groups = (g.k >> 4) / U;
  // Worker (warp, rank) takes groups worker, worker + kWarps * kS, ...
  const int worker = warp * kS + rank;

  float acc[NT][MT8][4];
  ZeroAcc(acc);

  // X rows of this lane's B fragments (clamped: rows >= M load row M-1 and are masked to zero).
  const T* xrow[MT8];
  bool xvalid[MT8];
#pragma unroll
  for (int i = 0; i < MT8; ++i) {
    const int tok = m0 + 8 * i + gr;
    xvalid[i] = tok < g.m;
    xrow[i] = x + int64_t(min(tok, g.m - 1)) * g.k + 2 * tq;
  }

  // Loop-carried pointers at this warp's current group: weights (bg) and X rows (xg, element
  // k0 = grp * U * 16); the next group is kStride groups on, a compile-time distance for X.
  constexpr int kStride = kWarps * kS;
  const ShufLanePointers<T> lp = MakeShufLanePointers<T>(b, scales, zp, g, nt0, lane);
  const int64_t group_bytes = int64_t(U) * lp.step_bytes;
  int grp = worker;
  const uint8_t* bg = lp.b + grp * group_bytes;
  const T* xg[MT8];
#pragma unroll
  for (int i = 0; i < MT8; ++i) xg[i] = xrow[i] + grp * U * 16;

  PdlAllowDependents();
  if (!weights_early) PdlWaitPrimary();
  ShufGroup<T, NT, U> cur;
  if (grp < groups) LoadShufGroup<T, NT, U>(cur, bg, lp, g, grp);
  if (weights_early) PdlWaitPrimary();  // X and Y only after the previous grid is complete
  static_assert(kXAhead == 0 || U % 2 == 0, "X-ahead alternates two register sets per step");
  static_assert(kXAhead < 2 || U == 4, "X two steps ahead: four register sets, one per step of a group");
  constexpr int kXSets = kXAhead == 0 ? 1 : kXAhead == 1 ? 2 : 4;
  // X fragments at element offset k from the current group's start (constant after unrolling).
  auto load_x = [&](int k, uint32_t (&xb)[MT8][2]) {
#pragma unroll
    for (int i = 0; i < MT8; ++i) {
      xb[i][0] = __ldg(reinterpret_cast<const uint32_t*>(xg[i] + k));
      xb[i][1] = __ldg(reinterpret_cast<const uint32_t*>(xg[i] + k + 8));
    }
  };
  uint32_t xs[kXSets][MT8][2];
  if constexpr (kXAhead > 0) {
    if (grp < groups) {
#pragma unroll
      for (int u = 0; u < kXAhead; ++u) load_x(u * 16, xs[u]);
    }
  }
  // One group: the next group's weights into `nxt` while `cur`'s MMAs run, then every pointer on
  // to the next group. At MT8 = 1 it is called with the two register sets in alternation (the
  // loop unrolled by two), so no register copy moves `nxt` into `cur` (~40 moves per group).
  auto run_group = [&](const ShufGroup<T, NT, U>& cur, ShufGroup<T, NT, U>& nxt) {
    const int gn = grp + kStride;
    const uint8_t* bn = bg + kStride * group_bytes;
    if (gn < groups) LoadShufGroup<T, NT, U>(nxt, bn, lp, g, gn);
    ShufRows<T> rows[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j)
      rows[j] = RowPairDecodeConstants<T>(cur.s[j][0], cur.z[j][0], cur.s[j][1], cur.z[j][1]);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      uint32_t (&xb)[MT8][2] = xs[u % kXSets];
      if constexpr (kXAhead > 0) {
        // the fragments kXAhead steps on: this group's step u + kXAhead, or the next group's
        if (u + kXAhead < U) {
          load_x((u + kXAhead) * 16, xs[(u + kXAhead) % kXSets]);
        } else if (gn < groups) {
          load_x(kStride * U * 16 + (u + kXAhead - U) * 16, xs[(u + kXAhead - U) % kXSets]);
        }
      } else {
        load_x(u * 16, xb);
#pragma unroll
        for (int i = 0; i < MT8; ++i) {
          xb[i][0] = xvalid[i] ? xb[i][0] : 0u;
          xb[i][1] = xvalid[i] ? xb[i][1] : 0u;
        }
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        uint32_t a[4];
        DecodeShufWord<T, true>(cur.q[u][j], rows[j], a);
#pragma unroll
        for (int i = 0; i < MT8; ++i) Mma16816<T>(acc[j][i], a[0], a[1], a[2], a[3], xb[i][0], xb[i][1]);
      }
    }
    grp = gn;
    bg = bn;
#pragma unroll
    for (int i = 0; i < MT8; ++i) xg[i] += kStride * U * 16;
  };
  ShufGroup<T, NT, U> other;
  if constexpr (MT8 == 1) {
    while (grp < groups) {
      run_group(cur, other);
      if (grp >= groups) break;
      run_group(other, cur);
    }
  } else {  // MT8 >= 2: the unrolled loop's registers would spill under the 128 cap
    while (grp < groups) {
      run_group(cur, other);
      cur = other;
    }
  }

  // Sum the warps' partial tiles (fixed order), one n16 tile at a time; with kS > 1 the CTA's sums
  // go to `tile`, and rank 0 adds the cluster's tiles (distributed shared memory, rank order).
  __shared__ float red[kWarps][MT8 * 4][32];
  __shared__ float tile[kS > 1 ? NT : 1][kS > 1 ? MT8 * 4 : 1][32];
  auto store = [&](int j, int e, float v) {
    const int i = e >> 2, r = e & 3;
    const int n = 16 * (nt0 + j) + (lane >> 2) + (r >= 2 ? 8 : 0);
    const int tok = m0 + 8 * i + 2 * (lane & 3) + (r & 1);
    if (tok < g.m) y[int64_t(tok) * g.n + n] = StoreT<T>(bias ? v + LoadF(bias, n) : v);
  };
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    if (j > 0) __syncthreads();
#pragma unroll
    for (int i = 0; i < MT8; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r) red[warp][i * 4 + r][lane] = acc[j][i][r];
    __syncthreads();
    for (int e = warp; e < MT8 * 4; e += kWarps) {
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += red[w][e][lane];
      if constexpr (kS > 1) {
        tile[j][e][lane] = v;
      } else {
        store(j, e, v);
      }
    }
  }
  if constexpr (kS > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every rank's tile is written
    if (rank == 0) {
      for (int je = warp; je < NT * MT8 * 4; je += kWarps) {
        const int j = je / (MT8 * 4), e = je % (MT8 * 4);
        float v = tile[j][e][lane];
#pragma unroll
        for (int q = 1; q < kS; ++q) v += cluster.map_shared_rank(&tile[0][0][0], q)[(j * MT8 * 4 + e) * 32 + lane];
        store(j, e, v);
      }
    }
    cluster.sync();  // rank 0 is done reading the others' shared memory before they exit
#endif
  }
}

bool AlignedTo(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

// The wide shared-memory kernel (matmul_int4_shuffled_wide_impl.cu) instead of the register mma
// kernel: when a wide variant is pinned, or by default (-1; not -2) for kInt4ShuffledWideMinM <= M.
bool UseShufWide(int variant, int m) {
  if (variant >= kInt4ShuffledWideVariantBase && variant < kInt4ShuffledGemvVariantBase) return true;
  return variant == -1 && m >= kInt4ShuffledWideMinM;
}

// kS > 1: clusters of kS CTAs split K (sm_90: the only GPUs where B is shuffled).
template <typename T, int MT8, int NT, int kWarps, int U, int kS = 1, int kXAhead = 0>
void LaunchShufMma(const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y, const Int4Geom& g,
                   PdlMode pdl, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(g.n / (16 * NT) * kS), static_cast<unsigned>((g.m + 8 * MT8 - 1) / (8 * MT8)));
  (void)LaunchWithPdlCluster(int4_shuffled_mma_kernel<T, MT8, NT, kWarps, U, kS, kXAhead>, grid, dim3(32 * kWarps), 0,
                             kS, stream, pdl.launch, x, b, s, zp, bias, y, g, pdl.weights_early);
}

// The mma kernel's configuration: MT8 by M (1, 2, 4, then 8 with grid.y covering the rest) and
// (NT, warps, U, cluster split kS) by variant (NT4 = 4 up to MT8 = 2, else 2: registers / smem):
//   0: (1, 8, 4, 1)    1: (2, 8, 4, 1)    2: (1, 16, 4, 1) (8 warps at MT8 8: smem)
//   3: (NT4, 8, 4, 2)  4: (NT4, 8, 4, 1)  5: (NT4, 8, 4, 4)  6: (2, 8, 4, 2)  7: (2, 4, 4, 4)
// variant < 0: 4 when N / 64 CTAs fill the SMs, else 3: every CTA reads all of X's K range (or
// its kS-th), so fewer, wider CTAs cut the L2 -> SM traffic of X (at M = 32 on 4096 x 4096 with
// NT = 1 it is 256 CTAs x 256 KB) and clusters restore the CTA count. H100, 4096 x 14336 at
// M = 2 / 4 / 8 / 16: variant 4 14.7 / 14.8 / 15.1 / 20.1 us against 15.9 / 24.2 / 22.2 / 23.6 for
// the row-major kernels; 4096 x 4096 (PYQUANT_INT4_SHUFFLE=all): variant 3 9.6 / 9.5 / 9.7 / 12.4
// against 6.1 / 9.1 / 9.6 / 8.9 (2026-11-24-h100-s9-shufvariants2-bench-cuda.md).
int CurrentSmCount() {
  const int sms = CurrentDeviceSmCount();
  return sms > 0 ? sms : 132;
}

// Variants 3 (kS = 2) and 4 (kS = 1), the default's two: (NT4, 8 warps, U = 4), with the X-ahead
// kernel (kXAhead = x_ahead steps: 1, or 2 at MT8 <= 2) when x_ahead > 0.
template <typename T, int MT8, int kS>
void LaunchShufMmaNt4(int x_ahead, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y,
                      const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  constexpr int kNt4 = MT8 <= 2 ? 4 : 2;
  if constexpr (MT8 <= 2) {
    if (x_ahead >= 2) {
      LaunchShufMma<T, MT8, kNt4, 8, 4, kS, 2>(x, b, s, zp, bias, y, g, pdl, stream);
      return;
    }
  }
  if (x_ahead > 0) {
    LaunchShufMma<T, MT8, kNt4, 8, 4, kS, 1>(x, b, s, zp, bias, y, g, pdl, stream);
  } else {
    LaunchShufMma<T, MT8, kNt4, 8, 4, kS>(x, b, s, zp, bias, y, g, pdl, stream);
  }
}

// x_ahead_knob (-1 = Int4ShuffledXAheadDefault, 0, 1, 2): the X-ahead kernels for variants 3 and 4.
template <typename T, int MT8>
void LaunchShufMmaMt(int variant, int x_ahead_knob, const T* x, const uint8_t* b, const T* s, const uint8_t* zp,
                     const T* bias, T* y, const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  constexpr int kNt4 = MT8 <= 2 ? 4 : 2;
  if (variant < 0) variant = g.n / 64 >= CurrentSmCount() ? 4 : 3;
  const int x_ahead = x_ahead_knob < 0 ? Int4ShuffledXAheadDefault(MT8) : x_ahead_knob;
  switch (variant) {
    case 1: LaunchShufMma<T, MT8, 2, 8, 4>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 2: LaunchShufMma<T, MT8, 1, (MT8 <= 4 ? 16 : 8), 4>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 3: LaunchShufMmaNt4<T, MT8, 2>(x_ahead, x, b, s, zp, bias, y, g, pdl, stream); break;
    case 4: LaunchShufMmaNt4<T, MT8, 1>(x_ahead, x, b, s, zp, bias, y, g, pdl, stream); break;
    case 5: LaunchShufMma<T, MT8, kNt4, 8, 4, 4>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 6: LaunchShufMma<T, MT8, 2, 8, 4, 2>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 7: LaunchShufMma<T, MT8, 2, 4, 4, 4>(x, b, s, zp, bias, y, g, pdl, stream); break;
    default: LaunchShufMma<T, MT8, 1, 8, 4>(x, b, s, zp, bias, y, g, pdl, stream);
  }
}

template <typename T>
void LaunchShufMmaVariant(int variant, int x_ahead, const T* x, const uint8_t* b, const T* s, const uint8_t* zp,
                          const T* bias, T* y, const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  if (g.m <= 8) {
    LaunchShufMmaMt<T, 1>(variant, x_ahead, x, b, s, zp, bias, y, g, pdl, stream);
  } else if (g.m <= 16) {
    LaunchShufMmaMt<T, 2>(variant, x_ahead, x, b, s, zp, bias, y, g, pdl, stream);
  } else if (g.m <= 32) {
    LaunchShufMmaMt<T, 4>(variant, x_ahead, x, b, s, zp, bias, y, g, pdl, stream);
  } else {
    LaunchShufMmaMt<T, 8>(variant, x_ahead, x, b, s, zp, bias, y, g, pdl, stream);
  }
}

}  // namespace

size_t Int4ShuffledWeightBytes(int64_t n, int64_t k) {
  if (n <= 0 || k <= 0 || n % 128 != 0 || k % 64 != 0) return 0;
  return size_t(n) * size_t(k) / 2;
}

cudaError_t ShuffleInt4Weights(const uint8_t* src, int64_t row_bytes, int64_t n, int64_t k, void* dst,
                               cudaStream_t stream) {
  const size_t bytes = Int4ShuffledWeightBytes(n, k);
  if (bytes == 0 || row_bytes * 2 < k || n * (k / 2) >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  cudaError_t e = cudaMemsetAsync(dst, 0, bytes, stream);
  if (e != cudaSuccess) return e;
  const int64_t total = n * (k / 2);
  int4_shuffle_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(
      src, static_cast<int>(row_bytes), static_cast<int>(n), static_cast<int>(k), static_cast<uint32_t*>(dst));
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchMatMulInt4Shuffled(const MatMulInt4Problem& p, cudaStream_t stream, PdlMode pdl,
                                     const Int4ShufKnobs& knobs) {
  const int variant = knobs.variant;
  if (p.m == 0) return cudaSuccess;
  if constexpr (std::is_same<T, float>::value) {
    return cudaErrorNotSupported;  // the op never shuffles a float32 node's weights
  } else {
    const auto& a = p.attrs;
    if (Int4ShuffledWeightBytes(a.n, a.k) == 0 || a.block_size < 64 || p.m >= (int64_t{1} << 31) / a.k) {
      return cudaErrorInvalidValue;
    }
    const Int4Geom g = MakeInt4Geom(p.m, a);
    const T* x = static_cast<const T*>(p.x);
    const T* s = static_cast<const T*>(p.scales);
    const T* bias = static_cast<const T*>(p.bias);
    T* y = static_cast<T*>(p.y);
    const int sms = CurrentSmCount();  // the default rules' one device query per launch
    const bool piece =
        Int4ShuffledPieceVariant(variant) || (variant == -1 && Int4ShuffledPieceByDefault(g.n, g.k, g.m, sms));
    if (piece && AlignedTo(x, 16)) {
      const int config = variant - kInt4ShuffledPieceVariantBase;
      return LaunchInt4ShufPiece<T>(config >= 0 && config < kInt4ShuffledPieceConfigs ? config : -1, knobs.piece_paired,
                                    sms, x, p.b, s, p.zero_points, bias, y, g, pdl, stream);
    }
    const bool variant_is_staged =
        variant >= kInt4ShuffledStagedVariantBase && variant < kInt4ShuffledStagedVariantBase + 3;
    const bool variant_is_gemv =
        variant >= kInt4ShuffledGemvVariantBase && !variant_is_staged && !Int4ShuffledPieceVariant(variant);
    const int gemv_config =
        variant_is_gemv ? variant - kInt4ShuffledGemvVariantBase
        : variant < 0 && p.m <= kInt4ShuffledGemvMaxM && !Int4ShuffledStagedOverGemv(g.n, g.k, p.m, sms)
            ? Int4ShuffledGemvDefaultConfig(g.n, p.m, sms)
            : -1;
    if (AlignedTo(x, 16) && p.m <= kInt4ShuffledGemvMaxM && gemv_config >= 0) {
      return LaunchInt4ShufGemv<T>(gemv_config, x, p.b, s, p.zero_points, bias, y, g, pdl, stream);
    }
    if (gemv_config < 0 && AlignedTo(x, 16) && g.m <= 65535 * 64 &&
        (variant_is_staged || (variant < 0 && Int4ShuffledStagedByDefault(g.n, sms)))) {
      // The staged kernel (matmul_int4_staged.h; grid.y covers M in rows of up to 64 tokens).
      const int shape = variant_is_staged ? variant - kInt4ShuffledStagedVariantBase : kInt4StagedAuto;
      const cudaError_t e =
          LaunchInt4StagedShuffled<T>(shape, Int4StagedLimits{}, x, p.b, s, p.zero_points, bias, y, g, pdl, stream);
      if (e != cudaErrorNotSupported) return e;  // else (K not a whole number of stages) the kernels below
    }
    if (UseShufWide(variant, g.m) && AlignedTo(x, 16) && g.m <= 65535 * 64) {
      const int wide = variant >= kInt4ShuffledWideVariantBase ? variant - kInt4ShuffledWideVariantBase : 0;
      return LaunchInt4ShufWide<T>(wide, knobs.wide_fill, x, p.b, s, p.zero_points, bias, y, g, pdl, stream);
    } else if (AlignedTo(x, 4) && g.m <= 65535 * 64) {
      const bool mma_variant = variant >= 0 && variant < kInt4ShuffledWideVariantBase;
      LaunchShufMmaVariant<T>(mma_variant ? variant : -1, knobs.x_ahead, x, p.b, s, p.zero_points, bias, y, g, pdl,
                              stream);
    } else {
      return LaunchMatMulInt4ShuffledRef<T>(p, stream);
    }
    return cudaGetLastError();
  }
}

template <typename T>
cudaError_t LaunchMatMulInt4ShuffledRef(const MatMulInt4Problem& p, cudaStream_t stream) {
  if (p.m == 0) return cudaSuccess;
  if (p.m > 65535) return cudaErrorInvalidConfiguration;
  const auto& a = p.attrs;
  if (!Int4ShuffleFits(a.n, a.k)) return cudaErrorInvalidValue;
  const Int4Geom g = MakeInt4Geom(p.m, a);
  const dim3 grid(static_cast<unsigned>((g.n + 127) / 128), static_cast<unsigned>(p.m));
  int4_shuffled_ref_kernel<T><<<grid, 128, 0, stream>>>(static_cast<const T*>(p.x), p.b,
                                                        static_cast<const T*>(p.scales), p.zero_points,
                                                        static_cast<const T*>(p.bias), static_cast<T*>(p.y), g);
  return cudaGetLastError();
}

#define PYQUANT_INSTANTIATE(T)                                                                      \
  template cudaError_t LaunchMatMulInt4Shuffled<T>(const MatMulInt4Problem&, cudaStream_t, PdlMode, \
                                                   const Int4ShufKnobs&);                           \
  template cudaError_t LaunchMatMulInt4ShuffledRef<T>(const MatMulInt4Problem&, cudaStream_t);
PYQUANT_INSTANTIATE(float)
PYQUANT_INSTANTIATE(__half)
PYQUANT_INSTANTIATE(__nv_bfloat16)
#undef PYQUANT_INSTANTIATE

}  // namespace pyquant
