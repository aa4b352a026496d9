// LinearFp8: the staged mma kernel for small and medium M (linear_fp8_staged.h), after the
// activation quantizer of linear_fp8_impl.cu. The FP8 analogue of matmul_int4_staged_impl.cu.
//
// Why: fp8_mma_kernel (linear_fp8_impl.cu) gives a CTA 8 NT output channels and reads all of its
// rows of xq over the whole of K: on long, narrow layers at M > 16 the re-reads of X from L2
// (ceil(N / 8 NT) times) exceed the weight bytes and bound it below torch fp16
// (bench/results/2026-11-25-h100-s19-m33-64.md). Here the weights and xq stream through a
// kStages-deep cp.async pipeline in shared memory, X is loaded once per CTA for its 64-128
// channels, and both operands come out of shared memory by ldmatrix.
//
// Operands: the weights are mma.sync's A operand (16 output channels per m16 tile), xq its B
// operand (8 tokens per n8 tile). e4m3 -> fp16 is exact and so are the fp16 products in the fp32
// accumulators (as in fp8_mma_kernel), so this computes the op's sums in another order.
//
// One CTA: kWarps = WN * WK warps. Warp (wn, wk) owns the m16 channel tiles wn * NT .. wn * NT +
// NT - 1 of the CTA's kRows = 16 * NT * WN channels and, in every stage, the 64-byte K "unit" wk
// of the stage's WK units (kStageK = 64 * WK bytes of K). After the mainloop the WK warps of a
// channel range and the kS ranks of a cluster (K split) add their partial tiles in a fixed order.
//
// Stage layout (bytes), s = stage slot, both operands one byte per element:
//   W: [channel r = 0 .. kRows - 1][kStageK bytes]; 16-byte chunk c of row r at chunk position
//      c ^ (r % 8): the 8 row addresses of one ldmatrix phase (same c, 8 consecutive rows, rows
//      kStageK = 128 / 256 bytes apart, i.e. on the same banks) then hit 8 different bank groups.
//   X: [token t = 0 .. 8 MT8 - 1][kStageK bytes], chunk c at c ^ (t % 8), the same way.
//   Tokens >= M and channels >= N are zero-filled (cp.async with 0 source bytes).
//
// The k <-> fragment-slot mapping (the MMA sums over k in any order; A and B use the same one):
// ldmatrix (b16) hands lane (g = lane / 4, t = lane % 4) bytes 4 t .. 4 t + 3 of row g of an
// 8 x 16-byte matrix, i.e. k = 16 c + 4 t + {0, 1, 2, 3} of chunk c. In the MMA step of chunk c,
// slots {2 t, 2 t + 1} hold k = 16 c + 4 t + {0, 1} (the word's low two bytes) and slots
// {2 t + 8, 2 t + 9} hold 16 c + 4 t + {2, 3} (its high two bytes), for A (rows g, g + 8 of the
// channel tile: a0 / a1 low, a2 / a3 high) and B (token g: b0 low, b1 high) alike.
// Accumulator c0, c1 = channel g, tokens 2 t, 2 t + 1; c2, c3 = channel g + 8.
//
// Scales: per-channel ones once per output (as fp8_mma_kernel: y = acc * w_scale * s_x + bias);
// per-block ones (block_size >= 64, so a 64-byte unit lies in one block) on each unit's fp32
// partial sums, loaded one stage ahead.
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/device_info.h"
#include "cuda/linear_fp8_impl.cuh"
#include "cuda/linear_fp8_staged.h"
#include "cuda/matmul_int4_impl.cuh"
#include "cuda/matmul_int4_shuffled_impl.cuh"
#include "cuda/matmul_int4_staged.h"  // kInt4StagedAuto / Wide / Tall, the shapes of both ops
#include "cuda/staged_common.cuh"
#include "cuda/staged_split.h"

namespace pyquant {

using namespace cuda_detail;
using fp8_detail::Fp8x2ToHalf2;

namespace {

template <int MT8, int NT, int WN, int WK, int kStages>
struct Fp8StagedShape {
  static constexpr int kWarps = WN * WK;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * NT * WN;       // output channels per CTA
  static constexpr int kTokens = 8 * MT8;          // tokens per CTA
  static constexpr int kStageK = 64 * WK;          // K bytes per stage: one 64-byte unit per k-warp
  static constexpr int kRowChunks = kStageK / 16;  // 16-byte chunks of a row per stage
  static constexpr int kWBytes = kRows * kStageK;
  static constexpr int kXBytes = kTokens * kStageK;
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kPartStride = kRows + 4;  // fp32 words per token row of a partial tile
  static constexpr int kPartBytes = WK * kTokens * kPartStride * 4;
  static constexpr int kSmem = std::max(kStages * kStageBytes, kPartBytes);
  static_assert(kRowChunks >= 8, "the chunk swizzle XORs 3 bits");
  static_assert(kWBytes % (16 * kThreads) == 0, "whole cp.async pieces per thread");
  static_assert(kThreads % kRowChunks == 0, "a fixed chunk per thread");
};

// Low / high two e4m3 bytes of a word -> fp16x2.
__device__ __forceinline__ uint32_t Lo2(uint32_t w) { return Fp8x2ToHalf2(w & 0xFFFFu); }
__device__ __forceinline__ uint32_t Hi2(uint32_t w) { return Fp8x2ToHalf2(w >> 16); }

// grid = (ceil(N / kRows) * ks, ceil(M / kTokens), gs.kz), cluster (ks, 1, 1) (ks > 1 on sm_90 only),
// block kThreads, dynamic shared memory kSmem. Arguments: Fp8StagedProblem's, bias / y as T. K is
// split into ks * gs.kz parts (staged_split.h): part blockIdx.z * ks + rank.
template <typename T, int MT8, int NT, int WN, int WK, int kStages, bool kBlock, int kMinBlocks>
__global__ void __launch_bounds__(32 * WN * WK, kMinBlocks)
    fp8_staged_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ s_x, const uint8_t* __restrict__ w,
                      const float* __restrict__ w_scale, const T* __restrict__ bias, T* __restrict__ y, int m, int n,
                      int k, int bs_log2, int n_scale_blocks, int ks, StagedGridSplit gs, bool weights_early) {
  using S = Fp8StagedShape<MT8, NT, WN, WK, kStages>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gr = lane >> 2;
  const int wn = warp % WN, wk = warp / WN;
  const int rank = static_cast<int>(blockIdx.x % ks);
  const int row0 = static_cast<int>(blockIdx.x / ks) * S::kRows;  // the CTA's first channel
  const int m0 = blockIdx.y * S::kTokens;
  const StagedStageRange part = StagedPartStages(k / S::kStageK, blockIdx.z * ks + rank, ks * gs.kz);
  const int s_begin = part.begin, n_my = part.count;

  auto w_stage = [&](int slot) { return smem + slot * S::kStageBytes; };
  auto x_stage = [&](int slot) { return smem + slot * S::kStageBytes + S::kWBytes; };
  // Stage i (of this rank) into slot i % kStages. Thread tid copies pieces tid + q * kThreads:
  // rows (channels or tokens) tid / kRowChunks + q * (kThreads / kRowChunks), chunk tid % kRowChunks.
  constexpr int kRowStep = S::kThreads / S::kRowChunks;
  const int p_r = tid / S::kRowChunks, p_c = tid % S::kRowChunks;
  auto load_w = [&](int i) {
    uint8_t* dst = w_stage(i % kStages);
    const int64_t kbyte = int64_t(s_begin + i) * S::kStageK + 16 * p_c;
#pragma unroll
    for (int q = 0; q < S::kWBytes / 16 / S::kThreads; ++q) {
      const int r = p_r + q * kRowStep;
      const bool valid = row0 + r < n;
      const uint8_t* src = valid ? w + int64_t(row0 + r) * k + kbyte : w;
      CpAsync16(dst + r * S::kStageK + 16 * (p_c ^ (r & 7)), src, valid);
    }
  };
  auto load_x = [&](int i) {
    uint8_t* dst = x_stage(i % kStages);
    const int64_t kbyte = int64_t(s_begin + i) * S::kStageK + 16 * p_c;
#pragma unroll
    for (int q = 0; q < (S::kXBytes / 16 + S::kThreads - 1) / S::kThreads; ++q) {
      const int t = p_r + q * kRowStep;
      if (t < S::kTokens) {
        const bool valid = m0 + t < m;
        const uint8_t* src = valid ? xq + int64_t(m0 + t) * k + kbyte : xq;
        CpAsync16(dst + t * S::kStageK + 16 * (p_c ^ (t & 7)), src, valid);
      }
    }
  };
  // Per-block scales of stage i for this lane: channels row0 + 16 (wn NT + j) + gr (+ 8), the block
  // of unit wk. Unused (never loaded) with per-channel scales.
  struct Scales {
    float s[NT][2];
  };
  auto load_scales = [&](int i, Scales& sc) {
    const int blk = ((s_begin + i) * S::kStageK + 64 * wk) >> bs_log2;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 16 * (wn * NT + j) + gr + 8 * h;
        sc.s[j][h] = row < n ? w_scale[int64_t(row) * n_scale_blocks + blk] : 0.0f;
      }
  };

  float acc[NT][MT8][4];
  ZeroAcc(acc);

  // Prologue: stages 0 .. kStages - 2 in flight; xq after the wait for the quantizer (PDL).
  PdlPipelinePrologue<kStages>(n_my, weights_early, load_w, load_x);

  // ldmatrix row addresses of this lane. W (two x4 loads per tile, chunk pairs 0-1 and 2-3 of the
  // unit): matrix lane / 8 = (row half (lane / 8) % 2, chunk lane / 16), row lane % 8. X (one x4
  // load per token tile): matrix lane / 8 = chunk, token lane % 8.
  const int lw_row = (lane & 7) + 8 * ((lane >> 3) & 1);
  const int lw_chunk = lane >> 4;
  const int lx_tok = lane & 7, lx_chunk = lane >> 3;

  auto step = [&](int i, const Scales& cur, Scales& nxt) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // stage i landed for every thread; slot (i - 1) % kStages is free again
    if (i + kStages - 1 < n_my) {
      load_w(i + kStages - 1);
      load_x(i + kStages - 1);
    }
    CpAsyncCommit();
    if constexpr (kBlock) {
      if (i + 1 < n_my) load_scales(i + 1, nxt);
    }

    const uint8_t* ws = w_stage(i % kStages);
    const uint8_t* xs = x_stage(i % kStages);
    // X of the unit: token tile mi's words [chunk 0..3] (chunk q = MMA step q).
    uint32_t xw[MT8][4];
#pragma unroll
    for (int mi = 0; mi < MT8; ++mi) {
      const int t = 8 * mi + lx_tok;
      const int c = 4 * wk + lx_chunk;
      Ldmatrix4(xw[mi], xs + t * S::kStageK + 16 * (c ^ (t & 7)));
    }
    float part[kBlock ? NT : 1][kBlock ? MT8 : 1][4];  // per-block scales: this unit's sums
    if constexpr (kBlock) ZeroAcc(part);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      uint32_t wq[2][4];  // [chunk pair][row g / g + 8 of the pair's first chunk, of its second]
#pragma unroll
      for (int pair = 0; pair < 2; ++pair) {
        const int r = 16 * (wn * NT + j) + lw_row;
        const int c = 4 * wk + 2 * pair + lw_chunk;
        Ldmatrix4(wq[pair], ws + r * S::kStageK + 16 * (c ^ (r & 7)));
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint32_t rg = wq[q >> 1][2 * (q & 1)], rg8 = wq[q >> 1][2 * (q & 1) + 1];
        const uint32_t a0 = Lo2(rg), a1 = Lo2(rg8), a2 = Hi2(rg), a3 = Hi2(rg8);
#pragma unroll
        for (int mi = 0; mi < MT8; ++mi) {
          if constexpr (kBlock) {
            Mma16816<__half>(part[j][mi], a0, a1, a2, a3, Lo2(xw[mi][q]), Hi2(xw[mi][q]));
          } else {
            Mma16816<__half>(acc[j][mi], a0, a1, a2, a3, Lo2(xw[mi][q]), Hi2(xw[mi][q]));
          }
        }
      }
    }
    if constexpr (kBlock) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int mi = 0; mi < MT8; ++mi) {
          acc[j][mi][0] = fmaf(part[j][mi][0], cur.s[j][0], acc[j][mi][0]);
          acc[j][mi][1] = fmaf(part[j][mi][1], cur.s[j][0], acc[j][mi][1]);
          acc[j][mi][2] = fmaf(part[j][mi][2], cur.s[j][1], acc[j][mi][2]);
          acc[j][mi][3] = fmaf(part[j][mi][3], cur.s[j][1], acc[j][mi][3]);
        }
    }
  };

  Scales sc0, sc1;
  if constexpr (kBlock) {
    if (n_my > 0) load_scales(0, sc0);
  }
  StagedMainLoop(n_my, sc0, sc1, step);  // staged_common.cuh

  // The k-warps' and the cluster ranks' partial tiles added, scales, bias, store (staged_common.cuh).
  const StagedTileAt at{m, n, m0, row0};
  StagedReduceStore<NT, MT8, WN, WK, S::kThreads>(acc, smem, ks, rank, gs, at, [&](int tok, int row, float v) {
    const int c = row0 + row;
    if (m0 + tok >= m || c >= n) return;
    if (!kBlock) v *= w_scale[c];
    v *= s_x[m0 + tok];
    if (bias) v += LoadF(bias, c);
    y[int64_t(m0 + tok) * n + c] = StoreT<T>(v);
  });
}

// The CTA shape and split of one problem: 2 channel tiles per warp (the FP8 weights take twice
// the bytes per k of INT4's, so 128 / 64 channels per CTA hold as many bytes as the INT4 kernel's
// 256 / 128), 8 warps as 4 (channels) x 2 (K), "wide", or 2 x 4, "tall".
constexpr int kNt = 2;
struct Fp8StagedPlan {
  bool ok = false;
  int mt8 = 1;  // 8-token tiles per CTA: 1, 2, 4, 8 by M
  bool tall = false;
  int ks = 1;  // CTAs per cluster splitting K (sm_90 only)
  int kz = 1;  // groups along grid.z splitting K further (staged_split.h)
};

Fp8StagedPlan PlanFp8Staged(const Fp8StagedProblem& p) {
  Fp8StagedPlan plan;
  if (p.m < 1) return plan;
  if (p.block_size != 0 && (p.block_size < 64 || (p.block_size & (p.block_size - 1)) != 0)) return plan;
  plan.mt8 = p.m <= 8 ? 1 : p.m <= 16 ? 2 : p.m <= 32 ? 4 : 8;
  int dev = 0;
  const bool sm90 = CurrentDeviceIsSm90(&dev);
  const int sms = CudaSmCount(dev) > 0 ? CudaSmCount(dev) : 132;
  const int64_t m_tiles = (p.m + 8 * plan.mt8 - 1) / (8 * plan.mt8);  // grid rows (M > 64)
  auto ctas = [&](bool tall) {
    const int rows = 16 * kNt * (tall ? 2 : 4);
    return int64_t((p.n + rows - 1) / rows) * m_tiles;
  };
  // As the INT4 kernel's auto shape (PlanInt4Staged): tall where the wide grid, split 8 ways,
  // leaves most SMs idle (at 64 tokens per CTA only where it is tiny: X re-reads).
  const int64_t tall_factor = plan.mt8 == 8 ? 32 : 8;
  plan.tall = p.shape == kInt4StagedTall || (p.shape == kInt4StagedAuto && ctas(false) * tall_factor < sms);
  const int stage_k = 64 * (plan.tall ? 4 : 2);
  if (p.k % stage_k != 0) {
    plan.tall = !plan.tall;  // the other shape's stages may fit K
    if (p.k % (64 * (plan.tall ? 4 : 2)) != 0) return plan;
  }
  const int stages = p.k / (64 * (plan.tall ? 4 : 2));
  // The K split (StagedClusterSplit): >= 1.5 CTAs per SM, each rank >= 2 stages.
  plan.ks = sm90 && kSm90Build ? StagedClusterSplit(ctas(plan.tall), stages, sms, p.split.max_cluster) : 1;
  plan.kz = StagedGridSplitFor(ctas(plan.tall), plan.ks, stages, sms, p.split.max_kz);
  plan.ok = true;
  return plan;
}

template <typename T, int MT8, int WN, int WK, bool kBlock>
cudaError_t LaunchShape(const Fp8StagedProblem& p, int ks, int kz, PdlMode pdl, cudaStream_t stream) {
  constexpr int kStages = 4;
  using S = Fp8StagedShape<MT8, kNt, WN, WK, kStages>;
  // Two CTAs (16 warps) per SM where the shared memory allows and the accumulators fit 128 registers.
  constexpr int kMinBlocks = S::kSmem <= 110 * 1024 && MT8 <= 4 ? 2 : 1;
  auto kernel = fp8_staged_kernel<T, MT8, kNt, WN, WK, kStages, kBlock, kMinBlocks>;
  static StagedLaunchFlags attributes_set;  // over 48 KB of dynamic shared memory, clusters of 16
  if (const cudaError_t e = PrepareStagedLaunch(kernel, S::kSmem, ks, attributes_set); e != cudaSuccess) return e;
  const StagedLaunchSplit ls = StagedSplitForLaunch(reinterpret_cast<const void*>(kernel), S::kThreads, S::kSmem, p.n,
                                                    p.m, S::kRows, S::kTokens, ks, kz, p.split.max_kz, stream);
  const int bs_log2 = CeilLog2(p.block_size);  // 0 for per-channel scales (block_size 0)
  return LaunchWithPdlCluster(kernel, ls.grid, dim3(S::kThreads), S::kSmem, static_cast<unsigned>(ls.ks), stream,
                              pdl.launch, p.xq, p.s_x, p.w, p.w_scale, static_cast<const T*>(p.bias),
                              static_cast<T*>(p.y), p.m, p.n, p.k, bs_log2, p.n_scale_blocks, ls.ks, ls.gs,
                              pdl.weights_early);
}

template <typename T, int MT8>
cudaError_t LaunchTokens(const Fp8StagedProblem& p, const Fp8StagedPlan& plan, PdlMode pdl, cudaStream_t stream) {
  const bool block = p.block_size != 0;
  if (plan.tall) {
    return block ? LaunchShape<T, MT8, 2, 4, true>(p, plan.ks, plan.kz, pdl, stream)
                 : LaunchShape<T, MT8, 2, 4, false>(p, plan.ks, plan.kz, pdl, stream);
  }
  return block ? LaunchShape<T, MT8, 4, 2, true>(p, plan.ks, plan.kz, pdl, stream)
               : LaunchShape<T, MT8, 4, 2, false>(p, plan.ks, plan.kz, pdl, stream);
}

}  // namespace

bool Fp8StagedFits(const Fp8StagedProblem& p) { return PlanFp8Staged(p).ok; }

template <typename T>
cudaError_t LaunchFp8Staged(const Fp8StagedProblem& p, PdlMode pdl, cudaStream_t stream) {
  const Fp8StagedPlan plan = PlanFp8Staged(p);
  const bool aligned = (reinterpret_cast<uintptr_t>(p.xq) & 15) == 0 && (reinterpret_cast<uintptr_t>(p.w) & 15) == 0;
  if (!plan.ok || !aligned) return cudaErrorNotSupported;
  switch (plan.mt8) {
    case 1: return LaunchTokens<T, 1>(p, plan, pdl, stream);
    case 2: return LaunchTokens<T, 2>(p, plan, pdl, stream);
    case 4: return LaunchTokens<T, 4>(p, plan, pdl, stream);
    default: return LaunchTokens<T, 8>(p, plan, pdl, stream);
  }
}

template cudaError_t LaunchFp8Staged<__half>(const Fp8StagedProblem&, PdlMode, cudaStream_t);
template cudaError_t LaunchFp8Staged<__nv_bfloat16>(const Fp8StagedProblem&, PdlMode, cudaStream_t);

}  // namespace pyquant
