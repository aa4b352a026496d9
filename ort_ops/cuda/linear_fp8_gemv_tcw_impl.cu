// LinearFp8 at decode on the tensor cores with warps that own their row tiles: the "tcw" GEMV
// (PYQUANT_FP8_GEMV=tcw, tcw1 / tcw2 / tcw4 / tcw8), M <= 8.
//
// Why: the "tc" GEMV (linear_fp8_gemv_tc_impl.cu) splits each row-tile group's K over all of a
// CTA's warps, so every group ends in a CTA barrier and a cross-warp sum through shared memory,
// and the warps that finish their share first wait there; at M = 1 it lost to the CUDA-core
// fused GEMV (H200, 4096 x 14336: 19.3 against 17.4 us), and halving the groups' size made it
// slower still (tc5, session 45). Here a tile of 16 rows belongs to S warps of one CTA (S = 1, 2,
// 4 or 8), each walking a fixed 1 / S of its units; the S warps meet once per tile at a named
// barrier of 32 S threads (no barrier at all for S = 1), and no warp waits for another tile.
//
// Same unit of work, k-order trick, numerics and shared X as "tc" (linear_fp8_gemv_tc.cuh; the
// description at the top of linear_fp8_gemv_tc_impl.cu): a unit is 16 rows x 64 k, one lane loads
// 16 bytes of rows gr and gr + 8, four m16n8k16 MMAs with tokens as the MMA's 8 columns.
//
// Decomposition: grid = (C CTAs, 1), C = min(tiles, SMs) by default (one CTA per SM: the next
// layer's CTA fits beside it under PDL), block = kWarps (8) warps, S | kWarps; tile slot
// ts = warp / S (kWarps / S per CTA) and slice sl = warp % S. Warp (b, ts, sl) takes tiles
// b + C (ts + (kWarps / S) i), i = 0, 1, ..., and of each tile the units sl, sl + S, ...; it keeps
// D units of weights in flight across its tiles. S is chosen so that tiles x S fills the C x
// kWarps warps (S = 1 where the tiles alone do): 4096 x 14336 has 896 tiles (S = 1 on 132 SMs),
// 4096 x 4096 256 (S = 4).
//
// Requirements (Fp8GemvTcwFits): those of "tc" and M <= 8.
#include <atomic>
#include <type_traits>

#include "cuda/device_info.h"
#include "cuda/linear_fp8_gemv.h"
#include "cuda/linear_fp8_gemv_tc.cuh"
#include "cuda/staged_common.cuh"  // SetFuncAttributeOnce

namespace pyquant {

using namespace cuda_detail;
using namespace fp8_detail;
using namespace fp8_tc_detail;

namespace {

constexpr int kTcwWarps = 8;
constexpr int kTcwDepth = 8;  // units in flight per warp (ring stages) by default; 4 and 16 by knob
// One ring stage: the lane's 16 bytes of row gr at [16 lane], of row gr + 8 at [512 + 16 lane]
// and, with per-K-block scales, the two rows' scales at [1024 + 8 lane].
template <bool kBlock>
constexpr int TcwStageBytes() {
  return 1024 + (kBlock ? 256 : 0);
}
size_t TcwRingBytes(bool block, int depth) {
  return static_cast<size_t>(kTcwWarps) * depth * (block ? TcwStageBytes<true>() : TcwStageBytes<false>());
}

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32).
__device__ __forceinline__ void NamedBarrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// cp.async with "memory" clobbers, so that the compiler keeps shared-memory reads of a stage
// after the wait for its group and before the copies that refill it.
__device__ __forceinline__ void TcwCopy16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void TcwCopy4(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void TcwCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void TcwWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Why cp.async and not loads into registers (as "tc"): a warp has 6 scoreboards for its
// variable-latency instructions; with 16 weight loads in flight the compiler makes them share,
// and the shared-X reads of a unit then wait on a scoreboard that a just-issued DRAM load also
// holds: one DRAM round trip per unit. The first version (git show 8ece87f) ran at 0.6-0.7 us per
// unit and warp whatever the number of warps (H200, 4096 x 14336 at M = 1: 46.9 against the
// fused GEMV's 17.2 us; bench/results/2026-11-29-h200-s46-tcw-bench-cuda.md). cp.async groups
// complete in order: waiting for the oldest leaves the D - 1 newer in flight.
//
//   x [M, K] T (M <= 8); static_scale / x_scale: the static activation scale (else dynamic per
//   token); w [N, K] e4m3; w_scale [N, nsb] float (nsb = 1 per channel, else ceil(K / 2^bs_log2));
//   bias [N] T or nullptr; y [M, N] T; xs_stride: halves per shared X row (TcXsStride).
//   split_log2: log2 S (S warps per tile, S <= kWarps). weights_early: w / w_scale are constant
//   initializers (PDL, cuda/pdl.h).
//   Dynamic shared memory: kWarps rings of D stages (TcwStageBytes), then X (TcSmemBytes).
template <typename T, int kWarps, int D, bool kBlock>
__global__ void __launch_bounds__(kWarps * 32, 2)
    fp8_gemv_tcw_kernel(const T* __restrict__ x, int static_scale, float x_scale, const uint8_t* __restrict__ w,
                        const float* __restrict__ w_scale, const T* __restrict__ bias, T* __restrict__ y, int m, int n,
                        int k, int bs_log2, int nsb, int xs_stride, int split_log2, bool weights_early) {
  extern __shared__ __align__(16) unsigned char tcw_smem[];
  constexpr int kStage = TcwStageBytes<kBlock>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned char* const ring = tcw_smem + warp * D * kStage;
  __half* const xs = reinterpret_cast<__half*>(tcw_smem + kWarps * D * kStage);
  const int gr = lane >> 2, tq = lane & 3;
  const int tokens = m;  // M <= 8: one grid row
  const int units = (k + kTcUnitK - 1) / kTcUnitK;
  const int split = 1 << split_log2;
  const int slots = kWarps >> split_log2;  // tiles in flight per CTA
  const int ts = warp >> split_log2, slice = warp & (split - 1);
  // Unit slots per tile of this warp: units slice + split * s; slots past the last unit are
  // empty, so that the S warps of a tile reach its end at the same step (the named barrier).
  const int per_tile = (units + split - 1) / split;
  const int tiles = (n + 15) / 16;
  const int first = int(blockIdx.x) + int(gridDim.x) * ts;
  const int stride = int(gridDim.x) * slots;
  const int my_tiles = first < tiles ? (tiles - first + stride - 1) / stride : 0;
  const int total = my_tiles * per_tile;  // the same for the S warps of a tile slot

  // Loads: slot index `next` -> this warp's tile t_ld, unit slot s_ld, into ring stage `stage`;
  // one commit group per slot, empty or not, so that group g is always slot g.
  int next = 0, t_ld = 0, s_ld = 0;
  auto load_next = [&](int stage) {
    const int unit = slice + split * s_ld;
    if (next < total && unit < units) {
      const int r0 = 16 * (first + stride * t_ld);
      const int kk = kTcUnitK * unit + 16 * tq;  // this lane's first k
      const bool kin = kk < k;                   // K % 16 == 0: out only in the tail unit (zero-filled)
      const int lo = min(r0 + gr, n - 1), hi = min(r0 + gr + 8, n - 1);  // clamped, never stored
      unsigned char* st = ring + stage * kStage;
      TcwCopy16(st + 16 * lane, w + int64_t(lo) * k + (kin ? kk : 0), kin);
      TcwCopy16(st + 512 + 16 * lane, w + int64_t(hi) * k + (kin ? kk : 0), kin);
      if constexpr (kBlock) {
        const int blk = (kTcUnitK * unit) >> bs_log2;
        TcwCopy4(st + 1024 + 8 * lane, w_scale + int64_t(lo) * nsb + blk);
        TcwCopy4(st + 1028 + 8 * lane, w_scale + int64_t(hi) * nsb + blk);
      }
    }
    TcwCommit();
    ++next;
    if (++s_ld == per_tile) s_ld = 0, ++t_ld;
  };

  PdlAllowDependents();
  if (!weights_early) PdlWaitPrimary();
#pragma unroll
  for (int d = 0; d < D; ++d) load_next(d);
  if (weights_early) PdlWaitPrimary();  // X and Y only after the previous grid is complete

  __shared__ float red_max[8][kWarps];
  __shared__ float inv_s[8], row_s[8];
  TcQuantizeX<T, 8, kWarps>(x, static_scale, x_scale, 0, tokens, k, units, xs, xs_stride, lane, warp, red_max, inv_s,
                            row_s);
  // This lane's B row: token gr (clamped to the last), k = 16 tq + 64 unit.
  const __half* xl = xs + min(gr, tokens - 1) * xs_stride + 16 * tq;

  float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
  // Split tiles: the S warps' partial sums, summed in slice order by slice 0; double-buffered by
  // tile parity (a slice writes tile i + 2's sums only after the barrier of tile i + 1, which
  // slice 0 reaches after reading tile i's).
  __shared__ float red[2][kWarps][4][32];
  int t_run = 0, s_run = 0;  // the tile / unit slot run next
  auto run_unit = [&](int stage) {
    TcwWait<D - 1>();  // this slot's group (the oldest pending) has landed
    const int unit = slice + split * s_run;
    if (unit < units) {
      const unsigned char* st = ring + stage * kStage;
      TcSlot<1, kBlock> sl;
      sl.lo[0] = *reinterpret_cast<const uint4*>(st + 16 * lane);
      sl.hi[0] = *reinterpret_cast<const uint4*>(st + 512 + 16 * lane);
      if constexpr (kBlock) {
        const float2 sc = *reinterpret_cast<const float2*>(st + 1024 + 8 * lane);
        sl.s_lo[0] = sc.x, sl.s_hi[0] = sc.y;
      }
      uint4 xv[1][2];
      xv[0][0] = *reinterpret_cast<const uint4*>(xl + kTcUnitK * unit);
      xv[0][1] = *reinterpret_cast<const uint4*>(xl + kTcUnitK * unit + 8);
      TcAccumulateTile<1, 1, kBlock>(sl, 0, xv, acc);
    }
    load_next(stage);
    if (++s_run < per_tile) return;
    // The tile's end: c[r] of lane (gr, tq) is row r0 + gr + 8 (r / 2), token 2 tq + r % 2.
    const int r0 = 16 * (first + stride * t_run);
    if (split > 1) {
      const int buf = t_run & 1;
#pragma unroll
      for (int e = 0; e < 4; ++e) red[buf][warp][e][lane] = acc[0][e];
      NamedBarrier(1 + ts, 32 * split);
      if (slice == 0) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = 0.0f;
          for (int s = 0; s < split; ++s) v += red[buf][warp + s][e][lane];
          acc[0][e] = v;
        }
      }
    }
    if (slice == 0) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tok = 2 * tq + (e & 1), row = r0 + gr + 8 * (e >> 1);
        if (tok < tokens && row < n) TcStoreOutput<T, kBlock>(acc[0][e], row, tok, row_s[tok], w_scale, bias, y, n);
      }
    }
    acc[0][0] = acc[0][1] = acc[0][2] = acc[0][3] = 0.0f;
    s_run = 0, ++t_run;
  };
  for (int i = 0; i < total; i += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (i + d < total) run_unit(d);
    }
  }
  TcwWait<0>();  // no copy outlives the CTA
}

template <typename T, int D, bool kBlock>
cudaError_t LaunchTcw(const LinearFp8Problem& p, int bs_log2, int split, int max_ctas, PdlMode pdl,
                      cudaStream_t stream) {
  auto kernel = fp8_gemv_tcw_kernel<T, kTcwWarps, D, kBlock>;
  static std::atomic<uint64_t> smem_set_on{0};
  cudaError_t e =
      SetFuncAttributeOnce(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kFp8GemvTcMaxSmem, smem_set_on);
  if (e != cudaSuccess) return e;
  const size_t smem = TcwRingBytes(kBlock, D) + TcSmemBytes(p.m, p.k);
  const int64_t tiles = (p.n + 15) / 16;
  const int64_t sms = std::max(1, CurrentDeviceSmCount());
  const int64_t ctas = std::max<int64_t>(1, std::min<int64_t>(tiles, max_ctas > 0 ? max_ctas : sms));
  if (split <= 0) {  // automatic: the largest S <= kTcwWarps with tiles x S <= the grid's warps
    split = 1;
    while (split < kTcwWarps && tiles * 2 * split <= ctas * kTcwWarps) split *= 2;
  }
  const int split_log2 = CeilLog2(split);
  const int st = p.static_scale ? 1 : 0;
  return LaunchWithPdlSmem(kernel, dim3(static_cast<unsigned>(ctas)), dim3(32 * kTcwWarps), smem, stream, pdl.launch,
                           static_cast<const T*>(p.x), st, p.x_scale, p.w, p.w_scale, static_cast<const T*>(p.bias),
                           static_cast<T*>(p.y), static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k),
                           bs_log2, static_cast<int>(p.n_scale_blocks), TcXsStride(p.k), split_log2, pdl.weights_early);
}

bool TcwDepthFits(const LinearFp8Problem& p, int depth) {
  return TcwRingBytes(p.block_size != 0, depth) + TcSmemBytes(p.m, p.k) <= kFp8GemvTcMaxSmem;
}

}  // namespace

bool Fp8GemvTcwFits(const LinearFp8Problem& p, size_t elem_bytes) {
  return p.m <= kFp8GemvTcwMaxM && Fp8GemvTcFits(p, elem_bytes) && TcwDepthFits(p, kTcwDepth);
}

template <typename T>
cudaError_t LaunchFp8GemvTcw(const LinearFp8Problem& p, int split, int depth, int max_ctas, PdlMode pdl,
                             cudaStream_t stream) {
  if (!Fp8GemvTcwFits(p, sizeof(T)) || (split != 0 && (split > kTcwWarps || (split & (split - 1)) != 0))) {
    return cudaErrorInvalidValue;
  }
  if ((depth != 4 && depth != 16) || !TcwDepthFits(p, depth)) depth = kTcwDepth;
  const int bs_log2 = CeilLog2(p.block_size);  // 0 for per-channel scales (block_size 0)
  auto launch = [&](auto d) {
    constexpr int D = decltype(d)::value;
    return p.block_size != 0 ? LaunchTcw<T, D, true>(p, bs_log2, split, max_ctas, pdl, stream)
                             : LaunchTcw<T, D, false>(p, bs_log2, split, max_ctas, pdl, stream);
  };
  if (depth == 4) return launch(std::integral_constant<int, 4>());
  if (depth == 16) return launch(std::integral_constant<int, 16>());
  return launch(std::integral_constant<int, kTcwDepth>());
}

template cudaError_t LaunchFp8GemvTcw<__half>(const LinearFp8Problem&, int, int, int, PdlMode, cudaStream_t);
template cudaError_t LaunchFp8GemvTcw<__nv_bfloat16>(const LinearFp8Problem&, int, int, int, PdlMode, cudaStream_t);

}  // namespace pyquant
