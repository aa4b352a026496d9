// LinearFp8 CUDA kernels and launchers.
//
// Stage 1, activation quantization: LaunchFp8Quantize (linear_fp8_quantize.h).
// Stage 2, one of
//   sm90::LaunchFp8Gemm (sm90/fp8_gemm_sm90.h): CUTLASS FP8 wgmma GEMM on compute capability 9.0
//     for M > 16 with per-channel weight scales (scales and bias in its epilogue);
//   linear_fp8_ref_kernel: the plain reference GEMM, one thread per output (ground truth of the
//     device tests; the path for K % 16 != 0 and block_size 16 / 32);
//   fp8_mma_kernel: tensor cores. e4m3 -> fp16 is exact (cvt.f16x2.e4m3x2 on sm_89+, bit decode
//     before), fp16 x fp16 products are exact in the fp32 accumulators, so this computes the same
//     sums as an FP8 MMA would, at half the FP8 rate but on sm_80 too. W is read once with
//     16-byte loads (1 byte per weight). Same fragment trick as matmul_int4_impl.cu: thread
//     t = lane % 4 loads 16 consecutive k (kb = chunk * 64 + 16 t) of its W row and of its
//     activation rows; MMA step s (0..3) gives slots {2t, 2t+1} <- kb + 4s + {0, 1} and
//     {2t+8, 2t+9} <- kb + 4s + {2, 3}. Warps split K (intra-CTA split-K); per-block weight
//     scales (block_size >= 64, so a 64-wide chunk lies in one block) are applied per chunk to
//     the chunk's fp32 partial sums, per-channel scales once at the end.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "cuda/device_info.h"
#include "cuda/linear_fp8.h"
#include "cuda/linear_fp8_gemv.h"
#include "cuda/linear_fp8_impl.cuh"
#include "cuda/linear_fp8_quantize.h"
#include "cuda/linear_fp8_staged.h"
#include "cuda/linear_fp8_weight_only.h"
#include "cuda/matmul_int4_impl.cuh"
#if PYQUANT_WITH_SM90
#include "cuda/sm90/fp8_gemm_sm90.h"
#endif

namespace pyquant {

using cuda_detail::LoadF;
using cuda_detail::StoreT;
using namespace fp8_detail;

namespace {

size_t AlignUp(size_t v) { return (v + 255) & ~size_t{255}; }

}  // namespace

// xq [M, K] e4m3, w [N, K] e4m3, w_scale [N, n_scale_blocks], s_x [M], bias [N] T, y [M, N] T.
template <typename T>
__global__ void linear_fp8_ref_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ s_x,
                                      const uint8_t* __restrict__ w, const float* __restrict__ w_scale,
                                      const T* __restrict__ bias, T* __restrict__ y, int64_t m, int64_t n, int64_t k,
                                      int64_t block_size, int64_t n_scale_blocks) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t row = blockIdx.y;
  if (col >= n || row >= m) return;
  const uint8_t* xr = xq + row * k;
  const uint8_t* wr = w + col * k;
  const float* ws = w_scale + col * n_scale_blocks;
  float acc = 0.0f;
  const int64_t bs = block_size ? block_size : k;
  for (int64_t k0 = 0, blk = 0; k0 < k; k0 += bs, ++blk) {
    float part = 0.0f;
    const int64_t k1 = min(k, k0 + bs);
    for (int64_t kk = k0; kk < k1; ++kk) part += Fp8ToFloat(xr[kk]) * Fp8ToFloat(wr[kk]);
    acc += part * ws[blk];
  }
  acc *= s_x[row];
  if (bias) acc += LoadF(bias, col);
  y[row * n + col] = StoreT<T>(acc);
}

namespace {

using namespace cuda_detail;

struct Fp8Geom {
  int m, n, k;
  int n_chunks;  // ceil(K / 64)
  int bs_log2;   // log2(block_size) when per-block scales, else unused
  int n_scale_blocks;
};

__device__ __forceinline__ uint32_t Word4(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// 16-byte activation load through L1, as LoadCached16, but volatile asm: volatile asm statements
// keep their program order, so the activation loads of a chunk group are issued together with
// its weight loads (LoadStream16, also volatile) before any MMA. With __ldg the compiler sank
// each activation load to its first use (54 registers: only the W loads were in flight), which
// put an L1/L2 round trip in front of every MMA step.
__device__ __forceinline__ uint4 LoadActivation16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

}  // namespace

// grid = (ceil(N / (8 NT)) * kS, ceil(M / (16 * MT))), block = 32 * kWarps.
//   xq [M, K] e4m3 (quantized X), s_x [M] float, w [N, K] e4m3, w_scale [N, n_scale_blocks]
//   float, bias [N] T or nullptr, y [M, N] T. kBlockScale: w_scale per 2^bs_log2-wide K block.
//   kLow8 (M <= 8, MT == 1): rows g + 8 of the MMA tile are all padding, so their activation
//   loads and registers are dropped (more CTAs per SM, so more weight bytes in flight).
//   kS > 1 (sm_90; "auto" / "mmasplit", Fp8MmaClusterSplit): clusters of kS CTAs split the K range of one
//   8-channel tile (rank = blockIdx.x % kS; worker (warp, rank) takes chunks worker,
//   worker + kWarps * kS, ...), summed in rank order by ReduceMmaTiles: for narrow layers,
//   where ceil(N / 8) CTAs leave SMs idle (N = 512: 64 CTAs).
//   NT > 1: each warp computes NT 8-channel tiles (8 NT channels per CTA) from one load of its
//   activation pieces: X is re-read ceil(N / (8 NT)) times from L2 instead of ceil(N / 8), which
//   bounds the kernel at M > 16 on long rows (Fp8Options::mma_nt).
template <typename T, int MT, int kWarps, bool kBlockScale, bool kLow8 = false, int kS = 1, int NT = 1>
__global__ void __launch_bounds__(32 * kWarps)
    fp8_mma_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ s_x, const uint8_t* __restrict__ w,
                   const float* __restrict__ w_scale, const T* __restrict__ bias, T* __restrict__ y, Fp8Geom g,
                   bool weights_early) {
  constexpr int kWorkers = kWarps * kS;  // chunk workers of one channel tile
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gr = lane >> 2, t = lane & 3;
  const int rank = kS > 1 ? static_cast<int>(blockIdx.x % kS) : 0;
  const int worker = warp * kS + rank;
  const int n0 = (blockIdx.x / kS) * 8 * NT;
  const int col = n0 + gr;  // this thread's W row of column tile 0 (tile j: col + 8 j)
  const int m0 = blockIdx.y * 16 * MT;
  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

  static_assert(!kLow8 || MT == 1, "kLow8 is the M <= 8 variant of MT == 1");
  // Chunks per group (16 bytes of W per thread each); with the double buffering below, 2 * U
  // groups of loads are in flight. U = 4 at MT = 1 keeps the registers under ~128 (4 CTAs of 128
  // threads per SM: N = 4096 is 512 CTAs, one wave on 132 SMs).
  // NT > 1: U = 1 (NT W loads per chunk already; the double buffer holds 2 (NT + 2 MT) of them).
  constexpr int U = NT > 1 ? 1 : MT == 1 ? 4 : 2;
  constexpr int kH = kLow8 ? 1 : 2;  // activation row halves loaded (g, g + 8)
  // Loads of one chunk group (U chunks of 64 k per warp, 16 bytes of W per thread each).
  // Unconditional loads from clamped addresses, masked afterwards (a load under a branch is its
  // own basic block). Rows / columns past M / N only feed outputs that are never stored, so they
  // re-read the last valid row; chunks past K must contribute exact zeros.
  auto load_group = [&](int c0, uint4(&wv)[U][NT], uint4(&xv)[U][MT][kH]) {
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
      const int kb = (c0 + uu * kWorkers) * 64 + 16 * t;
      const bool kin = c0 + uu * kWorkers < g.n_chunks && kb < g.k;  // K % 16 == 0: all 16 or none
      const int kbc = kin ? kb : 0;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint4 wl = LoadStream16(w + int64_t(min(col + 8 * j, g.n - 1)) * g.k + kbc);
        wv[uu][j] = kin ? wl : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < kH; ++h) {
          const int row = min(m0 + 16 * i + gr + 8 * h, g.m - 1);
          const uint4 xl = LoadActivation16(xq + int64_t(row) * g.k + kbc);
          xv[uu][i][h] = kin ? xl : make_uint4(0, 0, 0, 0);
        }
      }
    }
  };
  auto compute_group = [&](int c0, const uint4(&wv)[U][NT], const uint4(&xv)[U][MT][kH]) {
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
      float part[MT][NT][4];
      float (&dst)[MT][NT][4] = kBlockScale ? part : acc;
      if (kBlockScale) {
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < NT; ++j) part[i][j][0] = part[i][j][1] = part[i][j][2] = part[i][j][3] = 0.0f;
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint32_t ws = Word4(wv[uu][j], s);
          const uint32_t b0 = Fp8x2ToHalf2(ws & 0xFFFFu), b1 = Fp8x2ToHalf2(ws >> 16);
#pragma unroll
          for (int i = 0; i < MT; ++i) {
            const uint32_t x0 = Word4(xv[uu][i][0], s), x1 = kLow8 ? 0u : Word4(xv[uu][i][kH - 1], s);
            Mma16816<__half>(dst[i][j], Fp8x2ToHalf2(x0 & 0xFFFFu), Fp8x2ToHalf2(x1 & 0xFFFFu), Fp8x2ToHalf2(x0 >> 16),
                             Fp8x2ToHalf2(x1 >> 16), b0, b1);
          }
        }
      }
      if (kBlockScale) {
        AddBlockScaledChunk<MT, NT>(acc, part, w_scale, g.n, g.n_scale_blocks, g.bs_log2, g.n_chunks,
                                    c0 + uu * kWorkers, n0, t);
      }
    }
  };

  // Register double buffering across chunk groups: the next group's loads are issued (in their
  // own basic block, values live across the loop's back edge) before this group's MMAs. Loads
  // and their uses in one block let ptxas interleave them to save registers, which left one or
  // two 16-byte loads in flight per thread (SASS of the previous version).
  // PDL (cuda/pdl.h): xq is written by the quantizer just before, so nothing is loaded into
  // registers before the wait; with constant weights the first group's W lines are prefetched
  // into L2 meanwhile.
  PdlAllowDependents();
  if (weights_early) PrefetchFirstChunks<U, NT>(w, g.n, g.k, g.n_chunks, col, worker, kWorkers, t);
  PdlWaitPrimary();
  uint4 wv[U][NT], xv[U][MT][kH];
  if (worker < g.n_chunks) load_group(worker, wv, xv);
  for (int c0 = worker; c0 < g.n_chunks; c0 += U * kWorkers) {
    uint4 wc[U][NT], xc[U][MT][kH];
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
#pragma unroll
      for (int j = 0; j < NT; ++j) wc[uu][j] = wv[uu][j];
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < kH; ++h) xc[uu][i][h] = xv[uu][i][h];
    }
    if (c0 + U * kWorkers < g.n_chunks) load_group(c0 + U * kWorkers, wv, xv);
    compute_group(c0, wc, xc);
  }

  // value e = 4 i + r of this lane's column tile j, summed over K: scales, bias, store.
  auto emit = [&](int j, int e, float v) {
    const int i = e >> 2, r = e & 3;
    const int row = m0 + 16 * i + gr + (r >= 2 ? 8 : 0);
    const int c = n0 + 8 * j + 2 * t + (r & 1);
    if (row < g.m && c < g.n) {
      if (!kBlockScale) v *= w_scale[c];
      v *= s_x[row];
      if (bias) v += LoadF(bias, c);
      y[int64_t(row) * g.n + c] = StoreT<T>(v);
    }
  };
  __shared__ float red[kWarps][MT * 4][32];
  if constexpr (kS > 1 || NT > 1) {
    __shared__ float part[kS > 1 ? NT * MT * 4 * 32 : 1];
    cuda_detail::ReduceMmaTiles<MT, NT, kWarps, kS>([&](int i, int j, int r) { return acc[i][j][r]; }, red, part, rank,
                                                    emit);
  } else {
    // (kept apart from ReduceMmaTiles: the same sums, but this form is the tested code of every
    // other configuration, and ReduceMmaTiles compiles MT = 2 slightly differently)
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r) red[warp][i * 4 + r][lane] = acc[i][0][r];
    __syncthreads();
    for (int e = warp; e < MT * 4; e += kWarps) {
      float v = 0.0f;
#pragma unroll
      for (int ww = 0; ww < kWarps; ++ww) v += red[ww][e][lane];
      emit(0, e, v);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Swapped-operand small-M kernel (Fp8Options::gemv = 1 "swap", M <= 8, per-channel scales).
// W is the MMA's 16-row A operand (16 output channels per MMA), X^T the n8 B operand (the M <= 8
// tokens), so the MMA count per weight is half of fp8_mma_kernel's (which puts the mostly padded
// token rows in the m16 slot). Thread (g = lane / 4, t = lane % 4) loads, per 64-wide K chunk,
// 16 consecutive k (kb = chunk * 64 + 16 t) of W rows n0 + g and n0 + g + 8 and of token row g.
//   kFp8Mma = false: e4m3 -> fp16 (exact), mma m16n8k16 (sm_80+): word s (k = kb + 4s .. +3)
//     of each load gives slots {2t, 2t+1} <- kb + 4s + {0, 1}, {2t+8, 2t+9} <- kb + 4s + {2, 3}:
//     a0 / a2 = low / high half of row g's word, a1 / a3 = row g + 8's; b0 / b1 = token g's.
//   kFp8Mma = true: mma m16n8k32 on the e4m3 bytes themselves (sm_89+, no conversions, a quarter
//     of fp8_mma_kernel's MMAs): words (2j, 2j+1) of a load are the slots {4t..4t+3} and
//     {16+4t..16+4t+3} of MMA j: a0 / a2 = row g's words, a1 / a3 = row g + 8's, b0 / b1 = token
//     g's. Each MMA starts from zero accumulators and is added to the fp32 sums right after, so
//     the tensor core's reduced-precision accumulation spans one MMA (32 products): error
//     <= ~2^-12 of sum |x w| of those products, far inside the limit of docs/ops.md.
//     Native on sm_89 only: for sm_90a ptxas (CUDA 13.0) lowers each m16n8k32 e4m3 MMA to the
//     same e4m3 -> fp16 conversions, two HMMA.16816 and FADDs (SASS, session 22), so on Hopper it
//     saves nothing; FP8 tensor-core math there is wgmma's.
//   C: c0, c1 = channel g, tokens 2t, 2t + 1; c2, c3 = channel g + 8, same tokens.
// grid = ceil(N / 16), block = 32 * kWarps; warps split K (chunks warp, warp + kWarps, ...),
// reduced through shared memory. xq [M, K] e4m3, s_x [M], w [N, K] e4m3, w_scale [N], bias [N] T
// or nullptr, y [M, N] T.
// ---------------------------------------------------------------------------------------------
namespace {
__device__ __forceinline__ void MmaE4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};"
      : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f), "f"(0.0f), "f"(0.0f), "f"(0.0f));
#else
  __trap();  // the launcher selects kFp8Mma on compute capability >= 8.9 only
#endif
}
}  // namespace

template <typename T, int kWarps, bool kFp8Mma>
__global__ void __launch_bounds__(32 * kWarps)
    fp8_gemv_swap_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ s_x, const uint8_t* __restrict__ w,
                         const float* __restrict__ w_scale, const T* __restrict__ bias, T* __restrict__ y, Fp8Geom g) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gr = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * 16;
  // Rows past N / tokens past M re-read the last valid one (clamped, unconditional loads); their
  // outputs are never stored. Chunks past K are zeroed.
  const uint8_t* w_lo = w + int64_t(min(n0 + gr, g.n - 1)) * g.k;
  const uint8_t* w_hi = w + int64_t(min(n0 + gr + 8, g.n - 1)) * g.k;
  const uint8_t* x_row = xq + int64_t(min(gr, g.m - 1)) * g.k;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};

  constexpr int U = 4;  // chunks per load group; double-buffered: 2 groups (24 x 16 B) in flight
  auto load_group = [&](int c0, uint4(&wl)[U], uint4(&wh)[U], uint4(&xv)[U]) {
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
      const int kb = (c0 + uu * kWarps) * 64 + 16 * t;
      const bool kin = c0 + uu * kWarps < g.n_chunks && kb < g.k;
      const int kbc = kin ? kb : 0;
      const uint4 a = LoadStream16(w_lo + kbc), b = LoadStream16(w_hi + kbc), x = LoadActivation16(x_row + kbc);
      const uint4 z = make_uint4(0, 0, 0, 0);
      wl[uu] = kin ? a : z;
      wh[uu] = kin ? b : z;
      xv[uu] = kin ? x : z;
    }
  };
  auto compute_group = [&](const uint4(&wl)[U], const uint4(&wh)[U], const uint4(&xv)[U]) {
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
      if constexpr (kFp8Mma) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float d[4];
          MmaE4m3(d, Word4(wl[uu], 2 * j), Word4(wh[uu], 2 * j), Word4(wl[uu], 2 * j + 1), Word4(wh[uu], 2 * j + 1),
                  Word4(xv[uu], 2 * j), Word4(xv[uu], 2 * j + 1));
          acc[0] += d[0], acc[1] += d[1], acc[2] += d[2], acc[3] += d[3];
        }
      } else {
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          const uint32_t lo = Word4(wl[uu], s), hi = Word4(wh[uu], s), xs = Word4(xv[uu], s);
          Mma16816<__half>(acc, Fp8x2ToHalf2(lo & 0xFFFFu), Fp8x2ToHalf2(hi & 0xFFFFu), Fp8x2ToHalf2(lo >> 16),
                           Fp8x2ToHalf2(hi >> 16), Fp8x2ToHalf2(xs & 0xFFFFu), Fp8x2ToHalf2(xs >> 16));
        }
      }
    }
  };

  uint4 wl[U], wh[U], xv[U];
  if (warp < g.n_chunks) load_group(warp, wl, wh, xv);
  for (int c0 = warp; c0 < g.n_chunks; c0 += U * kWarps) {
    uint4 cl[U], ch[U], cx[U];
#pragma unroll
    for (int uu = 0; uu < U; ++uu) cl[uu] = wl[uu], ch[uu] = wh[uu], cx[uu] = xv[uu];
    if (c0 + U * kWarps < g.n_chunks) load_group(c0 + U * kWarps, wl, wh, xv);
    compute_group(cl, ch, cx);
  }

  __shared__ float red[kWarps][4][32];
#pragma unroll
  for (int r = 0; r < 4; ++r) red[warp][r][lane] = acc[r];
  __syncthreads();
  for (int r = warp; r < 4; r += kWarps) {
    float v = 0.0f;
#pragma unroll
    for (int ww = 0; ww < kWarps; ++ww) v += red[ww][r][lane];
    const int c = n0 + gr + (r >= 2 ? 8 : 0);  // channel
    const int row = 2 * t + (r & 1);           // token
    if (row < g.m && c < g.n) {
      v *= w_scale[c];
      v *= s_x[row];
      if (bias) v += LoadF(bias, c);
      y[int64_t(row) * g.n + c] = StoreT<T>(v);
    }
  }
}

namespace {

// Compute capability >= 8.9 (FP8 mma.sync), asked once per device.
bool CurrentDeviceHasFp8Mma() { return CurrentDeviceComputeCapability() >= 89; }

// Scratch layout: xq [M, K] bytes | s_x [M] float | sm90 GEMM workspace (stream-K partials).
size_t XqBytes(const LinearFp8Problem& p) { return AlignUp(static_cast<size_t>(p.m * p.k)); }
size_t SxBytes(const LinearFp8Problem& p) { return AlignUp(static_cast<size_t>(p.m) * sizeof(float)); }

// The small-M mma kernel's grid at M tile MT (m16 tiles per CTA row) and NT column tiles per warp
// without a K split: ceil(N / 8 NT) column CTAs x ceil(M / 16 MT) rows.
dim3 Fp8MmaGrid(const LinearFp8Problem& p, int mt, int nt) {
  return dim3(static_cast<unsigned>((p.n + 8 * nt - 1) / (8 * nt)),
              static_cast<unsigned>((p.m + 16 * mt - 1) / (16 * mt)));
}

// Column tiles per warp of the mma kernel at this M (Fp8Options::mma_nt): 1 up to M = 16; above,
// the knob, else 4 on sm_90 for rows of K >= 8192 (there the kernel serves M > 16 only on narrow
// layers, whose X traffic bounds it) with N >= 1024 or M > 32, else 1. H100, NT 4 against 1
// (bench/results/2026-11-25-h100-s19-fp8-final-bench-cuda.md): 14336 x 1024 at M = 17 / 32: 16.2 /
// 16.8 us vs 21.9 / 22.4; 8192 x 1024: 11.9 / 12.4 vs 14.3 / 14.5; 14336 x 512 at M = 33 / 64: 15.9 /
// 17.1 vs 21.9 / 23.1, but at M = 24 / 32: 14.8 / 15.3 vs 13.4 / 13.7 (16 column CTAs in clusters of 8).
// Slower at K = 4096 (4096 x 1024, M = 32: 10.6 vs 9.3, …-s19-fp8-nt-bench-cuda.md).
int Fp8MmaNt(const LinearFp8Problem& p, const Fp8Options& opt) {
  if (p.m <= 16) return 1;
  if (opt.mma_nt > 0) return opt.mma_nt;
  return p.k >= 8192 && (p.n >= 1024 || p.m > 32) && CurrentDeviceIsSm90() ? 4 : 1;
}

// "auto" or "auto" without the tc GEMV ("notc"): the same rules otherwise.
bool Fp8AutoLike(const Fp8Options& opt) { return opt.gemv == 0 || opt.gemv == kFp8GemvNoTc; }

// Where "auto" runs the tc GEMV (linear_fp8_gemv.h): kFp8GemvTcDefaultMinM <= M <= kFp8GemvTcDefaultMaxM
// on sm_90, below the Hopper GEMM and where the staged kernel does not serve the call (checked by
// the caller), where it fits. Session 44, H200: linear_fp8_gemv.h's kFp8GemvTcConfigs comment.
// The kernel runs on any GPU with fp16 mma.sync (sm_80+) when pinned; by default only where it was
// measured.
bool Fp8GemvTcByDefault(const LinearFp8Problem& p, const Fp8Options& opt) {
  return opt.gemv == 0 && p.m >= kFp8GemvTcDefaultMinM && p.m <= kFp8GemvTcDefaultMaxM && CurrentDeviceIsSm90();
}

// Whether the mma kernel splits K where its CTAs leave SMs idle ("auto" / "nostaged" / "mmasplit";
// "staged", whose kernel splits K too, falls back to it).
bool Fp8KSplitOn(const Fp8Options& opt) {
  return Fp8AutoLike(opt) || opt.gemv == kFp8GemvMmaSplit || opt.gemv == kFp8GemvStaged || opt.gemv == kFp8GemvNoStaged;
}

// Cluster size kS of that kernel's K split at M tile MT (1: none): the launch and the Hopper GEMM
// decision ask the same rule. MT = 1 up to M = 16, else 2 (LaunchLinearFp8Impl).
// fill (Fp8Options::k_split_fill): split until the grid has fill CTAs per SM instead of one.
int Fp8MmaClusterSplit(const LinearFp8Problem& p, int mt, int nt, int fill) {
  const dim3 grid = Fp8MmaGrid(p, mt, nt);
  const int64_t ctas = int64_t(grid.x) * grid.y;
  return ClusterKSplitFor((ctas + fill - 1) / fill, static_cast<int>((p.k + 63) / 64), 4);
}

// A narrow layer: one row of the mma kernel's NT = 1 grid (ceil(N / 8) CTAs) leaves SMs idle, so that
// the kernel splits K. The staged kernel's and the split-K Hopper GEMM's rules ask it.
bool Fp8NarrowLayer(const LinearFp8Problem& p, const Fp8Options& opt) {
  LinearFp8Problem one_row = p;
  one_row.m = 1;
  return Fp8MmaClusterSplit(one_row, 1, 1, opt.k_split_fill) > 1;
}

#if PYQUANT_WITH_SM90
// The shape / type / device part of the sm90 decision (pointers are checked at launch).
template <typename T>
bool Sm90Candidate(const LinearFp8Problem& p, const Fp8Options& opt, int* device) {
  int64_t min_m = p.n * p.k < (int64_t{1} << 25) ? opt.sm90_min_m_small : opt.sm90_min_m;
  // Narrow layers: the mma kernel with its K split below sm90_min_m_narrow (only asked where it
  // matters: the split needs the device's SM count). Judged on the NT = 1 grid whatever NT the
  // kernel then runs with: with NT = 4, 4096^2 at M = 17..32 looked narrow and lost the GEMM
  // (17.4 vs 12.2 us, …-s19-fp8-nt-bench-cuda.md).
  if (p.m < opt.sm90_min_m_narrow && p.m >= min_m && Fp8KSplitOn(opt) &&
      Fp8MmaClusterSplit(p, p.m <= 16 ? 1 : 2, 1, opt.k_split_fill) > 1) {
    min_m = opt.sm90_min_m_narrow;
  }
  if (std::is_same<T, float>::value) return false;  // fp16 / bf16 output only
  return p.block_size == 0 && p.m >= min_m && p.k % 16 == 0 && p.n % 8 == 0 && p.m < (int64_t{1} << 31) &&
         p.n < (int64_t{1} << 31) && p.k < (int64_t{1} << 31) && CurrentDeviceIsSm90(device);
}

// Long-K narrow layers above M = 64 (session 23): the Hopper GEMM's default there (128-channel data-parallel
// tiles, N / 128 CTAs) leaves most SMs idle. Its 128 x 64 cooperative tile split 4 ways along K fills them.
// H200, split 4 / default / torch fp16, µs at M = 96 / 128 / 192 / 256
// (bench/results/2026-11-26-h200-s23-fp8split-m96-narrow-bench-cuda.md, column n64s4): 14336 x 1024 20.4 /
// 21.1 / 21.3 / 22.7 vs 32.6 / 33.2 / 32.1 / 32.4 (13.5 / 14.3 / 16.9 / 18.5); 8192 x 1024 17.5 / 17.7 /
// 17.9 / 18.7 vs 20.8 / 21.2 / 20.5 / 20.7; 14336 x 512 19.9 / 20.2 / 20.6 / 21.3 vs 32.4 / 32.7 / 32.0 / 32.2
// (the staged kernel: 21.8 / 22.0 at 96 / 128). Not at K = 4096 (4096 x 1024: 16.0 vs 14.1), nor at M <= 64
// (the split costs ~1 µs per split in CUTLASS's ordered reduction: …-s23-fp8split-narrow-bench-cuda.md).
// Only with the default tiles and scheduler (no PYQUANT_FP8_SM90_TILE / _DECOMP set).
bool Fp8NarrowSplitK(const LinearFp8Problem& p, const Fp8Options& opt) {
  if (p.m <= 64 || p.m > kFp8NarrowSplitMaxM || p.k < kFp8StagedLongK || p.block_size != 0) return false;
  if (opt.sm90_variant != 0 || !opt.sm90_decomposition_auto || !CurrentDeviceIsSm90()) return false;
  return Fp8NarrowLayer(p, opt);
}

sm90::Fp8GemmArgs Sm90Args(const LinearFp8Problem& p, const uint8_t* xq, const float* s_x, int device,
                           const Fp8Options& opt) {
  sm90::Fp8GemmArgs a;
  a.tune.variant = opt.sm90_variant;
  a.tune.promote = opt.sm90_promote;
  static_cast<sm90::Sm90SchedulerTuning&>(a.tune) = opt.sm90_sched;
  // auto: data-parallel tiles up to M = 256 (measured faster there), CUTLASS's heuristic above.
  if (opt.sm90_decomposition_auto) a.tune.decomposition = p.m <= 256 ? 3 : 0;
  if (Fp8NarrowSplitK(p, opt)) {
    a.narrow_tile = true;
    a.tune.decomposition = 2;  // split-K, deterministic reduction
    a.tune.splits = kFp8NarrowSplits;
  }
  a.xq = xq;
  a.s_x = s_x;
  a.w = p.w;
  a.w_scale = p.w_scale;
  a.bias = p.bias;
  a.y = p.y;
  a.m = static_cast<int>(p.m);
  a.n = static_cast<int>(p.n);
  a.k = static_cast<int>(p.k);
  a.device = device;
  return a;
}
#endif

// LaunchFp8Quantize as a Sm90LaunchControl::pre_launch callback (ctx = this).
struct QuantizeLaunch {
  const LinearFp8Problem* p;
  uint8_t* xq;
  float* s_x;
  bool pdl;
  bool late_trigger;
  template <typename T>
  static cudaError_t Run(void* ctx, cudaStream_t stream) {
    const auto* q = static_cast<const QuantizeLaunch*>(ctx);
    LaunchFp8Quantize<T>(*q->p, q->xq, q->s_x, q->pdl, stream, q->late_trigger);
    return cudaGetLastError();
  }
};

}  // namespace

template <typename T>
size_t LinearFp8WorkspaceBytesT(const LinearFp8Problem& p, const Fp8Options& opt) {
  if (p.weight_only) return Fp8WeightOnlyWorkspaceBytes<T>(p, opt.sm90_min_m);  // no xq, no s_x
  size_t bytes = XqBytes(p) + SxBytes(p);
#if PYQUANT_WITH_SM90
  int device = 0;
  if (Sm90Candidate<T>(p, opt, &device)) {
    bytes += AlignUp(
        sm90::Fp8GemmWorkspaceBytes(Sm90Args(p, nullptr, nullptr, device, opt), std::is_same<T, __nv_bfloat16>::value));
  }
#endif
  return bytes;
}

size_t LinearFp8WorkspaceBytes(const LinearFp8Problem& p) { return p.weight_only ? 0 : XqBytes(p) + SxBytes(p); }

namespace {

bool Fp8FastPath(const LinearFp8Problem& p) {
  if (p.k % 16 != 0) return false;                           // 16-byte rows of W and xq
  if (p.block_size != 0 && p.block_size < 64) return false;  // a 64-wide chunk in one scale block
  if ((reinterpret_cast<uintptr_t>(p.w) & 15) != 0) return false;
  if (p.m * p.k >= (int64_t{1} << 31) || p.n * p.k >= (int64_t{1} << 31) || p.m * p.n >= (int64_t{1} << 31))
    return false;
  if ((p.m + 31) / 32 > 65535) return false;
  return true;
}

// Where "auto" runs the staged kernel (linear_fp8_staged.h): sm_90, fp16 / bf16 output, narrow layers
// (one row of the mma kernel's NT = 1 grid, ceil(N / 8) CTAs, leaves SMs idle, so that it splits K),
// kFp8StagedMinM <= M <= staged_max_m (kFp8StagedMaxM; below PYQUANT_FP8_SM90_MIN_M where that is set:
// it still forces the GEMM), except at M > 32 on layers with K < 8192 and N > 512. There it replaces the
// mma kernel and, on N = 1024 at M > 32, the Hopper GEMM. H100, against the session-20 default
// (bench/results/2026-11-25-h100-s21-staged-narrow-bench-cuda.md, staged65 / default / torch fp16):
// 14336 x 1024 at M = 16 / 32 / 64: 11.0 / 13.9 / 21.9 us vs 15.4 / 17.1 / 26.5 (14.9 / 15.5 / 15.9);
// 8192 x 1024 at M = 8: 7.5 vs 9.4; 14336 x 512 at M = 16: 9.8 vs 10.7; 4096 x 512 at M = 64: 9.2
// vs 9.4. Left out: 4096 x 1024 at M = 40-64 (11.6-11.9 vs the GEMM's 11.3-11.4), M <= 2 (the fused
// GEMV: 4.2 vs 5.8 us on 4096 x 1024 at M = 1), square layers (4096^2 at M = 16: 15.0 vs 12.5).
// From M = 3 (was 5) since session 22: at M = 3 / 4 it beat the mma kernel's split on all five
// narrow layers (…-s22-c16-narrow-bench-cuda.md, staged / default: 14336 x 1024 10.3 vs 13.3 us,
// 8192 x 1024 7.5 vs 9.2, 4096 x 1024 5.7 vs 6.6, 14336 x 512 8.0 vs 9.3, 4096 x 512 4.9 vs 5.1).
// Above M = 64 (session 23, up to staged_max_m) in two grid rows of 64 tokens, in place of the Hopper
// GEMM and its N / 128 CTAs, only where ceil(N / 8) <= SMs / 2 (N <= 512 on an H100 / H200): each row of
// tokens costs about what M = 64 does. Not where Fp8NarrowSplitK gives the rows to the split-K GEMM
// (K >= 8192, per-channel scales; 19.9 vs 21.8 µs on 14336 x 512 at M = 96). H200, µs, staged / GEMM / torch fp16
// (bench/results/2026-11-26-h200-s23-above64-narrow-bench-cuda.md): 14336 x 512 at M = 96 / 128: 21.9 /
// 22.1 vs 32.4 / 32.6 (10.8 / 10.4); slower at M = 256 (42.2 vs 32.3) and on N = 1024 (8192 x 1024 at
// M = 96: 28.5 vs 20.8; 14336 x 1024: 41.5 vs 32.5).
// From M = 2 where K >= kFp8StagedLongK, in place of the fused GEMV (…-s22-min3-narrow-bench-cuda.md,
// M = 2, staged / fused: 14336 x 1024 10.3 vs 13.0, 14336 x 512 8.0 vs 10.7 (torch fp16 10.1),
// 8192 x 1024 7.6 vs 8.1; at K = 4096 the GEMV is faster: 5.2 vs 5.7, 4.2 vs 4.9). M = 1 keeps the
// GEMV (staged 10.3 / 7.9 / 7.5 vs 10.3 / 8.4 / 6.6 on the same three).
template <typename T>
bool Fp8StagedByDefault(const LinearFp8Problem& p, const Fp8Options& opt) {
  if (std::is_same<T, float>::value || !Fp8AutoLike(opt)) return false;
  const int64_t min_m = p.k >= kFp8StagedLongK ? 2 : kFp8StagedMinM;
  if (p.m < min_m || p.m > opt.staged_max_m) return false;  // (PYQUANT_FP8_SM90_MIN_M caps staged_max_m)
#if PYQUANT_WITH_SM90
  if (Fp8NarrowSplitK(p, opt)) return false;  // the split-K Hopper GEMM above M = 64
#endif
  if (p.m > 64) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || 2 * ((p.n + 7) / 8) > CudaSmCount(dev)) return false;
  }
  if (p.m > 32 && p.k < 8192 && p.n > 512) return false;
  if (!Fp8FastPath(p) || !CurrentDeviceIsSm90()) return false;
  if (!Fp8NarrowLayer(p, opt)) return false;
  Fp8StagedProblem sp;
  sp.m = static_cast<int>(p.m), sp.n = static_cast<int>(p.n), sp.k = static_cast<int>(p.k);
  sp.block_size = static_cast<int>(p.block_size);
  sp.n_scale_blocks = static_cast<int>(p.n_scale_blocks);
  return Fp8StagedFits(sp);
}

// k_split_fill > 0 (Fp8KSplitOn; fp16 / bf16): clusters of Fp8MmaClusterSplit CTAs split K; 0: no split.
template <typename T, int MT, bool kBlock, bool kLow8 = false, int NT = 1>
void LaunchFp8Mma(const LinearFp8Problem& p, const uint8_t* xq, const float* s_x, const Fp8Geom& g, PdlMode pdl,
                  cudaStream_t stream, int k_split_fill = 0) {
  const dim3 grid = Fp8MmaGrid(p, MT, NT);
  auto launch = [&](auto ks) {
    constexpr int kS = decltype(ks)::value;
    const dim3 cluster_grid(grid.x * kS, grid.y);
    (void)LaunchWithPdlCluster(fp8_mma_kernel<T, MT, 4, kBlock, kLow8, kS, NT>, cluster_grid, dim3(128), 0, kS, stream,
                               pdl.launch, xq, s_x, p.w, p.w_scale, static_cast<const T*>(p.bias), static_cast<T*>(p.y),
                               g, pdl.weights_early);
  };
  const int ks = k_split_fill > 0 && !std::is_same<T, float>::value ? Fp8MmaClusterSplit(p, MT, NT, k_split_fill) : 1;
  if constexpr (!std::is_same<T, float>::value) {
    if (ks == 8) return launch(std::integral_constant<int, 8>());
    if (ks == 4) return launch(std::integral_constant<int, 4>());
    if (ks == 2) return launch(std::integral_constant<int, 2>());
  }
  launch(std::integral_constant<int, 1>());
}

}  // namespace

template <typename T>
cudaError_t LaunchLinearFp8Impl(const LinearFp8Problem& p, Fp8Workspace ws, cudaStream_t stream, bool force_ref,
                                const Fp8Options& opt, PdlMode pdl) {
  if (p.m == 0) return cudaSuccess;
  if (p.weight_only) return LaunchFp8WeightOnly<T>(p, ws.data, ws.bytes, opt.sm90_min_m, force_ref, pdl, stream);
  if (p.m > 65535 || ws.bytes < LinearFp8WorkspaceBytes(p)) return cudaErrorInvalidConfiguration;
  int device = 0;
  // the staged kernel in place of the mma kernel or the Hopper GEMM ("auto" on sm_90's narrow layers)
  const bool staged_default = !force_ref && Fp8StagedByDefault<T>(p, opt);
  bool sm90 = false;  // the Hopper GEMM's shape / type / device conditions (false for float)
#if PYQUANT_WITH_SM90
  sm90 = !staged_default && Sm90Candidate<T>(p, opt, &device);
#endif
  (void)device;
  if constexpr (!std::is_same<T, float>::value) {
    // The tensor-core fused GEMV where pinned (PYQUANT_FP8_GEMV=tc..tc5) or by default, below the
    // Hopper GEMM.
    const bool tc_knob = opt.gemv >= kFp8GemvTc && opt.gemv < kFp8GemvTc + kFp8GemvTcConfigs;
    const bool tc = tc_knob || (!staged_default && Fp8GemvTcByDefault(p, opt));
    if (!force_ref && tc && !sm90 && Fp8GemvTcFits(p, sizeof(T))) {
      const int config = opt.gemv == kFp8GemvTc ? -1 : opt.gemv - kFp8GemvTc;
      const cudaError_t e = LaunchFp8GemvTc<T>(p, config, opt.tc_max_ctas, pdl, stream);
      return e != cudaSuccess ? e : cudaGetLastError();
    }
    // Decode: quantization fused into the GEMV (no xq round trip, one launch), unless the Hopper
    // GEMM was asked for at this M.
    // "fused", "fused1".."fused4", "fused5", "fused6"
    const bool fused_knob = (opt.gemv >= 3 && opt.gemv < kFp8GemvMmaSplit) ||
                            (opt.gemv >= kFp8GemvFused5 && opt.gemv < kFp8GemvFused5 + kFp8GemvFusedVariants - 5);
    const int fused_variant = opt.gemv >= kFp8GemvFused5 ? 5 + opt.gemv - kFp8GemvFused5 : opt.gemv - 3;
    const bool fused_allowed =
        ((Fp8AutoLike(opt) || opt.gemv == kFp8GemvNoStaged) && p.m <= kFp8GemvAutoMaxM) || fused_knob;
    if (!force_ref && fused_allowed && !sm90 && !staged_default && Fp8GemvFusedFits(p, sizeof(T))) {
      return LaunchFp8GemvFused<T>(p, fused_knob ? fused_variant : Fp8GemvAutoVariant(p.m, p.n, p.k), pdl, stream);
    }
  }
  uint8_t* xq = static_cast<uint8_t*>(ws.data);
  float* s_x = reinterpret_cast<float*>(static_cast<char*>(ws.data) + XqBytes(p));
  const bool fast = !force_ref && Fp8FastPath(p);
#if PYQUANT_WITH_SM90
  if (fast && sm90) {
    const bool bf16 = std::is_same<T, __nv_bfloat16>::value;
    sm90::Fp8GemmArgs a = Sm90Args(p, xq, s_x, device, opt);
    const size_t off = XqBytes(p) + SxBytes(p);
    // Supported + enough scratch (the op sized it with LinearFp8WorkspaceBytesT); else the
    // portable kernel below serves this call.
    if (ws.bytes >= off && sm90::Fp8GemmSupported(a, bf16) && sm90::Fp8GemmWorkspaceBytes(a, bf16) <= ws.bytes - off) {
      // The quantizer is launched by the GEMM launcher right before the GEMM kernel (after its
      // workspace memset), so that the GEMM can follow it under PDL (sm90/launch_control.h).
      // The GEMM under PDL: up to M = kFp8GemmPdlEarlyMaxM the quantizer lets it start at once
      // (1-2 us per layer, 4096^2 M = 64: 12.7 vs 14.7: …-s6-final / …-s6-pdl-bench-cuda.md).
      // Above, an early start let the GEMM's CTAs take SMs from the larger quantizer grid (H100,
      // M = 1024: 138.5 vs 130.1 us without PDL on 4096 x 14336), so there the quantizer triggers
      // it only after its stores (Fp8Options::gemm_pdl_late: 1-8 % faster than no PDL at
      // M = 1024-4096, bench/results/2026-11-24-h100-s15-fp8-default-bench-cuda.md).
      const bool early = p.m <= kFp8GemmPdlEarlyMaxM;
      const bool late = !early && opt.gemm_pdl_late;
      QuantizeLaunch q{&p, xq, s_x, pdl.launch, late};
      a.launch.pdl = pdl.launch && (early || late);
      a.launch.pre_launch = &QuantizeLaunch::Run<T>;
      a.launch.pre_launch_ctx = &q;
      return sm90::LaunchFp8Gemm(a, bf16, static_cast<char*>(ws.data) + off, ws.bytes - off, stream);
    }
  }
#endif
  LaunchFp8Quantize<T>(p, xq, s_x, pdl.launch, stream);
  if (fast) {
    Fp8Geom g;
    g.m = static_cast<int>(p.m);
    g.n = static_cast<int>(p.n);
    g.k = static_cast<int>(p.k);
    g.n_chunks = static_cast<int>((p.k + 63) / 64);
    g.bs_log2 = CeilLog2(p.block_size);  // 0 for per-channel scales (block_size 0)
    g.n_scale_blocks = static_cast<int>(p.n_scale_blocks);
    const bool block = p.block_size != 0;
    const int split = Fp8KSplitOn(opt) ? opt.k_split_fill : 0;  // LaunchFp8Mma's k_split_fill
    if constexpr (!std::is_same<T, float>::value) {
      if (opt.gemv == kFp8GemvStaged || staged_default) {
        Fp8StagedProblem sp;
        sp.xq = xq, sp.s_x = s_x, sp.w = p.w, sp.w_scale = p.w_scale, sp.bias = p.bias, sp.y = p.y;
        sp.m = g.m, sp.n = g.n, sp.k = g.k;
        sp.block_size = static_cast<int>(p.block_size);
        sp.n_scale_blocks = g.n_scale_blocks;
        sp.split = opt.staged_split;
        sp.shape = opt.staged_shape;
        const cudaError_t e = LaunchFp8Staged<T>(sp, pdl, stream);
        if (e != cudaErrorNotSupported) return e != cudaSuccess ? e : cudaGetLastError();
      }
    }
    if (opt.gemv == 2 && p.m <= 8 && !block) {
      // Swapped operands: FP8 MMAs where the device has them, else fp16 MMAs after conversion.
      // 4 warps of 16 channels: the FP8 variant needs ~150 registers (24 x 16-byte loads in
      // flight per thread); capping it at 128 for 2 CTAs of 256 threads spilled.
      const dim3 grid(static_cast<unsigned>((p.n + 15) / 16));
      const T* bias = static_cast<const T*>(p.bias);
      T* y = static_cast<T*>(p.y);
      if (CurrentDeviceHasFp8Mma()) {
        fp8_gemv_swap_kernel<T, 4, true><<<grid, 128, 0, stream>>>(xq, s_x, p.w, p.w_scale, bias, y, g);
      } else {
        fp8_gemv_swap_kernel<T, 4, false><<<grid, 128, 0, stream>>>(xq, s_x, p.w, p.w_scale, bias, y, g);
      }
    } else if (p.m <= 8) {
      block ? LaunchFp8Mma<T, 1, true, true>(p, xq, s_x, g, pdl, stream, split)
            : LaunchFp8Mma<T, 1, false, true>(p, xq, s_x, g, pdl, stream, split);
    } else if (p.m <= 16) {
      block ? LaunchFp8Mma<T, 1, true>(p, xq, s_x, g, pdl, stream, split)
            : LaunchFp8Mma<T, 1, false>(p, xq, s_x, g, pdl, stream, split);
    } else if (const int nt = Fp8MmaNt(p, opt); nt == 4) {
      block ? LaunchFp8Mma<T, 2, true, false, 4>(p, xq, s_x, g, pdl, stream, split)
            : LaunchFp8Mma<T, 2, false, false, 4>(p, xq, s_x, g, pdl, stream, split);
    } else if (nt == 2) {
      block ? LaunchFp8Mma<T, 2, true, false, 2>(p, xq, s_x, g, pdl, stream, split)
            : LaunchFp8Mma<T, 2, false, false, 2>(p, xq, s_x, g, pdl, stream, split);
    } else {
      block ? LaunchFp8Mma<T, 2, true>(p, xq, s_x, g, pdl, stream, split)
            : LaunchFp8Mma<T, 2, false>(p, xq, s_x, g, pdl, stream, split);
    }
    return cudaGetLastError();
  }
  const int threads = 128;
  dim3 grid(static_cast<unsigned>((p.n + threads - 1) / threads), static_cast<unsigned>(p.m));
  linear_fp8_ref_kernel<T><<<grid, threads, 0, stream>>>(xq, s_x, p.w, p.w_scale, static_cast<const T*>(p.bias),
                                                         static_cast<T*>(p.y), p.m, p.n, p.k, p.block_size,
                                                         p.n_scale_blocks);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchLinearFp8(const LinearFp8Problem& p, Fp8Workspace ws, cudaStream_t stream, const Fp8Options& opt,
                            PdlMode pdl) {
  return LaunchLinearFp8Impl<T>(p, ws, stream, false, opt, pdl);
}
template <typename T>
cudaError_t LaunchLinearFp8Ref(const LinearFp8Problem& p, Fp8Workspace ws, cudaStream_t stream) {
  Fp8Options opt;
  opt.sm90_min_m = opt.sm90_min_m_small = int64_t{1} << 62;
  return LaunchLinearFp8Impl<T>(p, ws, stream, true, opt, PdlMode{});
}

#define PYQUANT_INSTANTIATE(T)                                                                                    \
  template size_t LinearFp8WorkspaceBytesT<T>(const LinearFp8Problem&, const Fp8Options&);                        \
  template cudaError_t LaunchLinearFp8<T>(const LinearFp8Problem&, Fp8Workspace, cudaStream_t, const Fp8Options&, \
                                          PdlMode);                                                               \
  template cudaError_t LaunchLinearFp8Ref<T>(const LinearFp8Problem&, Fp8Workspace, cudaStream_t);
PYQUANT_INSTANTIATE(float)
PYQUANT_INSTANTIATE(__half)
PYQUANT_INSTANTIATE(__nv_bfloat16)
#undef PYQUANT_INSTANTIATE

}  // namespace pyquant
