// What the two staged mma kernels share (matmul_int4_staged_impl.cu, linear_fp8_staged_impl.cu):
// the main loop's driver, the epilogue that adds the partial tiles of a CTA's k-warps and of its
// cluster's ranks, the K split rule, and the launch preparation (PrepareStagedLaunch: the one-time
// kernel attributes for large dynamic shared memory and clusters of 16; StagedGrid).
// SetFuncAttributeOnce is also used by matmul_int4_shuffled_wide_impl.cu.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/matmul_int4_impl.cuh"  // CpAsyncWait
#include "cuda/staged_split.h"

namespace pyquant {
namespace cuda_detail {

// Whether sm_90 machine code was built (the build's PYQUANT_WITH_SM90): the staged kernels' cluster
// sum exists only there, so their plans split K only in such a build.
#if PYQUANT_WITH_SM90
constexpr bool kSm90Build = true;
#else
constexpr bool kSm90Build = false;
#endif

// Ordered sums of kN partial values for the thread's elements e = e_begin + threadIdx.x + i kThreads
// < e_end: out(e, ((0 + load(0, e)) + load(1, e)) + ... + load(kN - 1, e)). kU elements at a time
// (32 loads), all of their loads issued before the adds: each load is a round trip to another SM's
// shared memory or to L2, and one at a time (the sums' old loop) they cost ~kN round trips per element.
template <int kN, int kThreads, typename Load, typename Out>
__device__ __forceinline__ void StagedOrderedSums(int e_begin, int e_end, const Load& load, const Out& out) {
  constexpr int kU = kN >= 16 ? 2 : 4;
  for (int e0 = e_begin + static_cast<int>(threadIdx.x); e0 < e_end; e0 += kU * kThreads) {
    float x[kU][kN];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int e = min(e0 + u * kThreads, e_end - 1);  // past the end: a valid element, sum unused
#pragma unroll
      for (int q = 0; q < kN; ++q) x[u][q] = load(q, e);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      float v = 0.0f;
#pragma unroll
      for (int q = 0; q < kN; ++q) v += x[u][q];
      if (e0 + u * kThreads < e_end) out(e0 + u * kThreads, v);
    }
  }
}

// The staged kernels' accumulators, [NT][MT8][4] per lane of warp (wn, wk) = (warp % WN, warp / WN):
// element r of tile (j, mi) is output channel 16 (wn NT + j) + lane / 4 + 8 (r >= 2) of the CTA and
// token 8 mi + 2 (lane % 4) + (r & 1). After the mainloop (every warp done with `smem`), they go
// to partial tiles [wk][token][channel] (fp32, rows padded by 4 words against bank conflicts) in
// smem; the WK tiles are added in k-warp order and, with a cluster K split (ks > 1, sm_90 only), the
// ranks' sums in rank order, each rank adding and storing one slice of the tile (run-to-run
// identical). store(token, channel, sum) gets each of the CTA's 8 MT8 x 16 NT WN sums once
// (consecutive threads: consecutive channels); it checks the bounds.
//
// With a grid split (gs.kz > 1, staged_split.h), the CTA writes its slice's sums (for tokens < m,
// channels < n) into gs.ws[blockIdx.z] instead, and the CTA of the kz groups that arrives last at
// the slice's counter (gs.flags[blockIdx.y][blockIdx.x]) adds the kz slices in z order, calls store,
// and re-arms the counter. `at` places the CTA's tile in the m x n output.
struct StagedTileAt {
  int m, n;      // the output's tokens and channels
  int m0, row0;  // the CTA's first token and channel
};
template <int NT, int MT8, int WN, int WK, int kThreads, typename Store>
__device__ __forceinline__ void StagedReduceStore(const float (&acc)[NT][MT8][4], uint8_t* smem, int ks, int rank,
                                                  const StagedGridSplit& gs, const StagedTileAt& at,
                                                  const Store& store) {
  constexpr int kRows = 16 * NT * WN, kTokens = 8 * MT8, kPartStride = kRows + 4;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gr = lane >> 2, tq = lane & 3;
  const int wn = warp % WN, wk = warp / WN;
  float* part = reinterpret_cast<float*>(smem);
  constexpr int kTile = kTokens * kPartStride;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int mi = 0; mi < MT8; ++mi)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = 16 * (wn * NT + j) + gr + (r >= 2 ? 8 : 0);
        const int tok = 8 * mi + 2 * tq + (r & 1);
        part[wk * kTile + tok * kPartStride + row] = acc[j][mi][r];
      }
  __syncthreads();

  // Token-major elements e = tok * kRows + row.
  constexpr int kElems = kTokens * kRows;
  const bool grid_split = gs.kz > 1;
  const int64_t ld = at.n;
  float* ws_mine = grid_split ? gs.ws + (int64_t(blockIdx.z) * at.m + at.m0) * ld + at.row0 : nullptr;
  auto emit = [&](int tok, int row, float v) {
    if (!grid_split) {
      store(tok, row, v);
    } else if (at.m0 + tok < at.m && at.row0 + row < at.n) {
      ws_mine[tok * ld + row] = v;
    }
  };
  auto wk_sum = [&](int e) {
    const int idx = (e / kRows) * kPartStride + e % kRows;
    float v = part[idx];
#pragma unroll
    for (int q = 1; q < WK; ++q) v += part[q * kTile + idx];
    return v;
  };
  if (ks == 1) {
    for (int e = tid; e < kElems; e += kThreads) emit(e / kRows, e % kRows, wk_sum(e));
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (WK > 1) {
      // the k-warps' sum into part[0] (each element read and written by one thread)
      for (int e = tid; e < kElems; e += kThreads) {
        const float v = wk_sum(e);
        part[(e / kRows) * kPartStride + e % kRows] = v;
      }
    }
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every rank's partial tile is complete
    // Rank r adds slice r of the tile over ranks 0 .. ks - 1, in rank order (reproducible).
    const int e_begin = (kElems / ks) * rank, e_end = e_begin + kElems / ks;  // kElems % 128 == 0
    auto rank_sums = [&](auto kN) {
      StagedOrderedSums<decltype(kN)::value, kThreads>(
          e_begin, e_end,
          [&](int q, int e) { return cluster.map_shared_rank(part, q)[(e / kRows) * kPartStride + e % kRows]; },
          [&](int e, float v) { emit(e / kRows, e % kRows, v); });
    };
    switch (ks) {
      case 2: rank_sums(std::integral_constant<int, 2>()); break;
      case 4: rank_sums(std::integral_constant<int, 4>()); break;
      case 8: rank_sums(std::integral_constant<int, 8>()); break;
      default: rank_sums(std::integral_constant<int, 16>());  // StagedClusterSplit: powers of two <= 16
    }
    cluster.sync();  // no rank exits while another still reads its shared memory
#endif
  }
  if (!grid_split) return;

  // The grid split's second pass: the last group to arrive adds the kz slices in z order.
  __threadfence();  // this thread's ws writes are visible device-wide before the CTA's arrival
  unsigned* flag = gs.flags + int64_t(blockIdx.y) * gridDim.x + blockIdx.x;
  bool last = false;
  if (tid == 0) last = atomicAdd(flag, 1u) == static_cast<unsigned>(gs.kz - 1);
  if (!__syncthreads_or(last)) return;
  __threadfence();
  const int slice = ks == 1 ? kElems : kElems / ks;
  const int e_begin = ks == 1 ? 0 : slice * rank;
  const int64_t z_stride = int64_t(at.m) * ld;
  const float* ws0 = gs.ws + int64_t(at.m0) * ld + at.row0;  // (token m0, channel row0) of group 0
  auto in_bounds = [&](int e) { return at.m0 + e / kRows < at.m && at.row0 + e % kRows < at.n; };
  auto group_sums = [&](auto kN) {
    StagedOrderedSums<decltype(kN)::value, kThreads>(
        e_begin, e_begin + slice,
        [&](int z, int e) {  // L2 loads (other SMs wrote these); outside the output: a valid dummy
          return __ldcg(ws0 + z * z_stride + (in_bounds(e) ? (e / kRows) * ld + e % kRows : 0));
        },
        [&](int e, float v) {
          if (in_bounds(e)) store(e / kRows, e % kRows, v);
        });
  };
  switch (gs.kz) {
    case 2: group_sums(std::integral_constant<int, 2>()); break;
    case 4: group_sums(std::integral_constant<int, 4>()); break;
    default: group_sums(std::integral_constant<int, 8>());  // StagedSplitLimits: kz <= 8, a power of two
  }
  if (tid == 0) *flag = 0u;  // re-armed for the next launch (no group of this one touches it again)
}

// p, as a value the compiler cannot trace back to the kernel's parameters. A pointer computed
// once before a main loop (a row's first scale, say) is otherwise often "rematerialized": rebuilt
// inside the loop from the parameters (constant-bank loads, 64-bit products) at each use to save
// its two registers, which in the staged kernels cost more instructions than the loop's copies.
template <typename P>
__device__ __forceinline__ P* PinnedPointer(P* p) {
  uint64_t v = reinterpret_cast<uint64_t>(p);
  asm volatile("mov.b64 %0, %0;" : "+l"(v));
  return reinterpret_cast<P*>(v);
}

// The stages [begin, begin + count) of K part q of `parts` (parts = ks cluster ranks x kz groups;
// part q = blockIdx.z * ks + rank): an even split, so a part's stages are consecutive.
struct StagedStageRange {
  int begin, count;
};
__device__ __forceinline__ StagedStageRange StagedPartStages(int stages, int q, int parts) {
  const int begin = static_cast<int>((int64_t(stages) * q) / parts);
  return {begin, static_cast<int>((int64_t(stages) * (q + 1)) / parts) - begin};
}

// The staged kernels' main loop: step(i, cur, next) for the rank's stages i = 0 .. n_my - 1, with
// two scale registers sets alternating (step i uses `cur` and preloads stage i + 1's into `next`),
// then the pipeline drained. After it every warp is done with the pipeline's shared memory.
template <typename Scales, typename Step>
__device__ __forceinline__ void StagedMainLoop(int n_my, Scales& sc0, Scales& sc1, const Step& step) {
#pragma unroll 1
  for (int i = 0; i < n_my; i += 2) {
    step(i, sc0, sc1);
    if (i + 1 < n_my) step(i + 1, sc1, sc0);
  }
  CpAsyncWait<0>();
  __syncthreads();
}

// Sets a function attribute of `kernel` once per device and kernel instance (`done`: a
// function-local static of the instance's launcher, one bit per device; devices >= 64 set it at
// every call). Used for more than 48 KB of dynamic shared memory
// (cudaFuncAttributeMaxDynamicSharedMemorySize) and for clusters of more than 8 CTAs, which
// sm_90 allows as a "non-portable" size (cudaFuncAttributeNonPortableClusterSizeAllowed).
template <typename Kernel>
cudaError_t SetFuncAttributeOnce(Kernel kernel, cudaFuncAttribute attr, int value, std::atomic<uint64_t>& done) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const uint64_t dev_bit = dev < 64 ? uint64_t{1} << dev : 0;
  if (dev_bit != 0 && (done.load(std::memory_order_acquire) & dev_bit) != 0) return cudaSuccess;
  e = cudaFuncSetAttribute(kernel, attr, value);
  if (e == cudaSuccess) done.fetch_or(dev_bit, std::memory_order_acq_rel);
  return e;
}

// What both staged launchers do before a launch: the kernel's dynamic shared memory opt-in and, for
// a K split over more than 8 CTAs, the non-portable cluster size, each once per device (`done`: the
// launcher's two function-local flags of this kernel instance); and the grid, ceil(n / rows) column
// CTAs times ks cluster ranks by ceil(m / tokens) token rows.
struct StagedLaunchFlags {
  std::atomic<uint64_t> smem{0}, large_clusters{0};
};
template <typename Kernel>
cudaError_t PrepareStagedLaunch(Kernel kernel, int smem_bytes, int ks, StagedLaunchFlags& done) {
  cudaError_t e = SetFuncAttributeOnce(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes, done.smem);
  if (e == cudaSuccess && ks > 8) {
    e = SetFuncAttributeOnce(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1, done.large_clusters);
  }
  return e;
}
inline dim3 StagedGrid(int64_t n, int64_t m, int rows, int tokens, int ks) {
  return dim3(static_cast<unsigned>((n + rows - 1) / rows * ks), static_cast<unsigned>((m + tokens - 1) / tokens));
}

// A launch's K split and grid (both staged launchers), for an m x n output in tiles of rows x tokens:
// the plan's (ks, kz) fitted to one wave (FitStagedSplitToOneWave, kz <= max_kz) and the grid
// split's buffers (StagedSplitBuffers; one counter per CTA of grid.x * grid.y). Where no buffers
// can be had (capture with too small ones), the plan's cluster split alone (kz = 1), as before the
// fit. grid = (ceil(n / rows) * ks, ceil(m / tokens), gs.kz).
struct StagedLaunchSplit {
  int ks;
  StagedGridSplit gs;
  dim3 grid;
};
inline StagedLaunchSplit StagedSplitForLaunch(const void* kernel, int threads, int smem, int64_t n, int64_t m, int rows,
                                              int tokens, int ks, int kz, int max_kz, cudaStream_t stream) {
  const dim3 tiles = StagedGrid(n, m, rows, tokens, 1);
  int fit_ks = ks, fit_kz = kz;
  FitStagedSplitToOneWave(kernel, threads, smem, int64_t(tiles.x) * tiles.y, max_kz, &fit_ks, &fit_kz);
  dim3 xy = StagedGrid(n, m, rows, tokens, fit_ks);
  const StagedGridSplit gs =
      StagedSplitBuffers(stream, fit_kz, static_cast<size_t>(m), static_cast<size_t>(n), size_t(xy.x) * xy.y);
  if (gs.kz == 1 && fit_kz > 1) {
    fit_ks = ks;
    xy = StagedGrid(n, m, rows, tokens, ks);
  }
  return {fit_ks, gs, dim3(xy.x, xy.y, gs.kz)};
}

// The staged kernels' K split (both ops): the smallest power of two ks <= max_ks that gives
// ctas * ks >= 1.5 CTAs per SM, each rank keeping >= 2 of the `stages` stages of K. max_ks = 8 by
// default (the portable cluster size); 16 where asked (PYQUANT_STAGED_MAX_CLUSTER=16): at 64 tokens
// per CTA a narrow layer's grid of ctas * 8 leaves SMs idle (14336 x 1024: 64 CTAs on 132 SMs,
// bench/results/2026-11-25-h100-s21-staged-default.md).
inline int StagedClusterSplit(int64_t ctas, int stages, int sms, int max_ks) {
  int ks = 1;
  while (ks < max_ks && ctas * ks * 2 < 3 * int64_t(sms) && stages / (2 * ks) >= 2) ks *= 2;
  return ks;
}

// The grid split (staged_split.h) on top of a cluster split ks, for more CTAs: the largest power of
// two kz <= max_kz that keeps ctas * ks * kz within the SMs (the staged kernels run one CTA per SM at
// 64 tokens), each of the ks * kz parts keeping >= 6 stages. The global reduction costs about what a
// few stages do: on an H200 (bench/results/2026-11-26-h200-s24-fit-*-narrow-bench-cuda.md) the split
// paid where each part kept 7 stages (INT4 14336 x 1024 at M = 64: 18.5 vs 20.6 µs; 14336 x 512 at
// M = 96: 18.3 vs 20.6) and lost where it kept 2-4 (INT4 8192 x 1024 at M = 16: 10.1 vs 8.2; FP8
// 4096 x 512 at M = 96: 16.0 vs 11.2). FitStagedSplitToOneWave may raise kz further at launch.
inline int StagedGridSplitFor(int64_t ctas, int ks, int stages, int sms, int max_kz) {
  int kz = 1;
  while (kz < max_kz && ctas * ks * kz * 2 <= int64_t(sms) && stages / (2 * ks * kz) >= 6) kz *= 2;
  return kz;
}

}  // namespace cuda_detail
}  // namespace pyquant
