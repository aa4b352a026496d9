// LinearFp8 at decode and small batches on the tensor cores, with the activation quantization
// fused in: the "tc" GEMV (PYQUANT_FP8_GEMV=tc, tc1..tc5).
//
// Why: the CUDA-core fused GEMV (linear_fp8_gemv_impl.cu) converts every weight to fp32 and
// spends ~2.5 instructions per weight on conversions and FMAs, plus the on-the-fly quantization
// of X for every 16 k of every row group; on an H200 it reaches 77-82 % of the HBM floor at M = 1
// on the large layers (bench/results/2026-11-28-h200-s40-fp8-bench-cuda.md; the H100, whose floor
// is 1.4x longer, 84-90 %). Its per-token FMAs make it lose to quantizer + mma.sync from M = 4.
//
// Here one cvt turns two e4m3 weights into an fp16 pair (exact) and m16n8k16 MMAs do the dot
// products, so a 64-k unit of two rows costs a lane 2 loads, 16 cvt and 4 MMAs (~0.4
// instructions per weight byte instead of ~2.5); X is quantized once per CTA into shared memory
// as fp16 (the e4m3 values are exact in fp16), and tokens are the MMA's 8 columns: M = 1..8 cost
// the same instructions.
//
// The k order trick (as the INT4 piece kernel, matmul_int4_shuffled_piece_impl.cu): an MMA's k
// order is free as long as A and B agree. Lane (gr, tq) = (lane / 4, lane % 4) loads the 16 bytes
// of rows r + gr and r + 8 + gr at k = 64 u + 16 tq (unit u); word i (bytes 4i..4i+3) of each
// becomes the fp16 pairs h[2i] (k + 4i, +1) and h[2i+1] (k + 4i + 2, +3), which MMA i takes as
// a0 / a2 (row gr) and a1 / a3 (row gr + 8). The fragment's k slots {2tq, 2tq+1} and
// {2tq+8, 2tq+9} then hold the real k = 64 u + 16 tq + 4i + {0, 1} and {2, 3}, the same for every
// gr, so B of lane (gr', tq) must hold X[token gr'] at those k: the fp16 words 2i, 2i + 1 of
// X[token][64 u + 16 tq .. + 15], an aligned pair of one 16-byte shared-memory load. The four
// MMAs cover the unit's 64 k.
//
//   W bytes of one lane and unit (row gr; row gr + 8 alike):
//     k:     64u+16tq+ 0 1 2 3 | 4 5 6 7 | 8 9 10 11 | 12 13 14 15
//     word:  0                 | 1       | 2         | 3
//     cvt:   h0 (0,1) h1 (2,3) | h2 h3   | h4 h5     | h6 h7
//     MMA i: a0 = h[2i], a2 = h[2i+1] (row gr); a1, a3 the same of row gr + 8;
//            b0, b1 = fp16 X words 2i, 2i + 1 (k 64u+16tq+4i .. +3 of token gr)
//
// Numerics: X quantized with the quantizers' arithmetic (DynamicFp8RowScale, Quant2; static
// scales as given), the products e4m3 x e4m3 exact in the MMA's fp32, summed in fp32; per-K-block
// weight scales (block_size a power of two >= 64: a unit lies in one block) multiply each unit's
// fp32 partial sums; then (sum * w_scale) * s_x + bias as linear_fp8_ref_kernel. Within
// docs/ops.md's limit as the mma.sync kernels (same products, fp32 sums in another order).
//
// Decomposition: a group = NT row tiles of 16 rows x 8 MT8 tokens; grid = (the CTAs that fit at
// once, or fewer where there are fewer groups, ceil(M / 8 MT8)), block = 32 kWarps. CTA b walks
// groups b, b + grid.x, ...; its warps split each group's ceil(K / 64) units (warp w: units w,
// w + kWarps, ...), each keeping D units of weights in flight, across group boundaries; a group's
// partial sums meet in shared memory in warp order (double-buffered, one barrier per group).
// Every CTA quantizes its tokens' rows of X once (PDL: after its first weight loads are issued
// and the previous grid has completed; X is a few KB per token, L2-resident). Session 44's first
// version had one group per CTA: ceil(N / 16) CTAs each requantizing X, which cost more than the
// weights from M = 4 (4096 x 14336, M = 4: 40.9 us against the default's 23.4,
// bench/results/2026-11-28-h200-s44-tc-bench-cuda.md).
//
// Shared memory: xs [rows][stride] fp16, rows = min(M, 8 MT8) tokens of the CTA, stride =
// ceil(K / 64) * 64 + 8 halves: k >= K zero-filled (the tail unit's B), and the 16-byte skew makes
// the 8 rows' loads of one phase conflict-free. Lanes of columns past M read token M - 1.
//
// Requirements (Fp8GemvTcFits): T = __half / __nv_bfloat16, K % 16 == 0, X and W 16-byte aligned,
// block_size 0 or a power of two >= 64, xs within kFp8GemvTcMaxSmem, N * K < 2^31.
#include <atomic>

#include "cuda/linear_fp8_gemv.h"
#include "cuda/linear_fp8_impl.cuh"
#include "cuda/staged_common.cuh"  // SetFuncAttributeOnce
#include "cuda/staged_split.h"     // ResidentCtas

namespace pyquant {

using namespace cuda_detail;
using namespace fp8_detail;

namespace {

constexpr int kTcUnitK = 64;
constexpr int kTcSkewHalves = 8;  // 16 bytes between consecutive rows' banks

// One unit's loads for NT row tiles: the lane's 16 bytes of rows gr (lo) and gr + 8 (hi), and
// with per-K-block scales their block's scales.
template <int NT, bool kBlock>
struct TcSlot {
  uint4 lo[NT], hi[NT];
  float s_lo[kBlock ? NT : 1], s_hi[kBlock ? NT : 1];
};

//   x [M, K] T; static_scale / x_scale: the static activation scale (else dynamic per token);
//   w [N, K] e4m3; w_scale [N, nsb] float (nsb = 1 per channel, else ceil(K / 2^bs_log2));
//   bias [N] T or nullptr; y [M, N] T; xs_stride: halves per shared X row (see above).
//   grid.x <= the row-tile groups ceil(N / 16 NT); CTA b takes groups b, b + grid.x, ...
//   weights_early: w / w_scale are constant initializers (PDL, cuda/pdl.h).
template <typename T, int MT8, int NT, int kWarps, int D, int kMinCtas, bool kBlock>
__global__ void __launch_bounds__(kWarps * 32, kMinCtas)
    fp8_gemv_tc_kernel(const T* __restrict__ x, int static_scale, float x_scale, const uint8_t* __restrict__ w,
                       const float* __restrict__ w_scale, const T* __restrict__ bias, T* __restrict__ y, int m, int n,
                       int k, int bs_log2, int nsb, int xs_stride, bool weights_early) {
  extern __shared__ __align__(16) unsigned char tc_smem[];
  __half* const xs = reinterpret_cast<__half*>(tc_smem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gr = lane >> 2, tq = lane & 3;
  const int m0 = blockIdx.y * 8 * MT8;
  const int tokens = min(m - m0, 8 * MT8);
  const int units = (k + kTcUnitK - 1) / kTcUnitK;
  // Each warp walks per_tile unit slots per tile group (units w, w + kWarps, ...; slots past the
  // last unit are empty), so that every warp reaches the end of a group at the same step: the
  // groups' cross-warp sums need a CTA barrier there.
  const int per_tile = (units + kWarps - 1) / kWarps;
  const int groups = (n + 16 * NT - 1) / (16 * NT);
  const int my_groups = (groups - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);
  const int total = my_groups * per_tile;  // the same for every warp of the CTA

  // Loads: this warp's slot index `next` -> group g_ld (its index among the CTA's), unit slot s_ld.
  int next = 0, g_ld = 0, s_ld = 0;
  auto load_next = [&](TcSlot<NT, kBlock>& sl) {
    const int unit = warp + kWarps * s_ld;
    if (next < total && unit < units) {
      const int r0 = (int(blockIdx.x) + int(gridDim.x) * g_ld) * 16 * NT;
      const int kk = kTcUnitK * unit + 16 * tq;  // this lane's first k
      const bool kin = kk < k;                   // K % 16 == 0: a piece is in or out; out only in the tail unit
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        // rows r0 + 16 j + gr (+ 8), clamped to N - 1 (never stored)
        const int lo = min(r0 + 16 * j + gr, n - 1), hi = min(r0 + 16 * j + gr + 8, n - 1);
        sl.lo[j] = kin ? LoadStream16(w + int64_t(lo) * k + kk) : make_uint4(0, 0, 0, 0);
        sl.hi[j] = kin ? LoadStream16(w + int64_t(hi) * k + kk) : make_uint4(0, 0, 0, 0);
        if constexpr (kBlock) {
          const int blk = (kTcUnitK * unit) >> bs_log2;
          sl.s_lo[j] = __ldg(w_scale + int64_t(lo) * nsb + blk);
          sl.s_hi[j] = __ldg(w_scale + int64_t(hi) * nsb + blk);
        }
      }
    }
    ++next;
    if (++s_ld == per_tile) s_ld = 0, ++g_ld;
  };

  PdlAllowDependents();
  if (!weights_early) PdlWaitPrimary();
  TcSlot<NT, kBlock> slot[D];
#pragma unroll
  for (int d = 0; d < D; ++d) load_next(slot[d]);
  if (weights_early) PdlWaitPrimary();  // X and Y only after the previous grid is complete

  // Row scales of this CTA's tokens: amax over the whole row (NaN ignored by fmaxf), then the
  // quantizers' rule; or the static scale.
  constexpr int kTok = 8 * MT8;
  __shared__ float red_max[kTok][kWarps];
  __shared__ float inv_s[kTok], row_s[kTok];
  const int vecs = k / 8;  // 16-byte vectors of X per row
  if (static_scale) {
    if (threadIdx.x < kTok) inv_s[threadIdx.x] = 1.0f / x_scale, row_s[threadIdx.x] = x_scale;
  } else {
    CtaDynamicRowScales<T, kTok, kWarps, false>(x, m0, tokens, k, lane, warp, red_max, inv_s, row_s);
  }
  __syncthreads();
  // Quantize: xs[t][kk] = e4m3(x * inv) as fp16, zeros from K to the last unit's end.
  {
    const int pad_vecs = units * (kTcUnitK / 8);
    for (int idx = threadIdx.x; idx < tokens * pad_vecs; idx += kWarps * 32) {
      const int t = idx / pad_vecs, v = idx - t * pad_vecs;
      uint4 o = make_uint4(0, 0, 0, 0);
      if (v < vecs) {
        float f[8];
        ToFloats(LoadCached16(x + int64_t(m0 + t) * k + 8 * v), f, static_cast<const T*>(nullptr));
        const float inv = inv_s[t];
        o.x = Fp8x2ToHalf2(Quant2(f[0], f[1], inv));
        o.y = Fp8x2ToHalf2(Quant2(f[2], f[3], inv));
        o.z = Fp8x2ToHalf2(Quant2(f[4], f[5], inv));
        o.w = Fp8x2ToHalf2(Quant2(f[6], f[7], inv));
      }
      *reinterpret_cast<uint4*>(xs + t * xs_stride + 8 * v) = o;
    }
  }
  __syncthreads();

  // This lane's B rows: token m0 + 8 i + gr (clamped to the CTA's last token), k = 16 tq + 64 unit.
  const __half* xl[MT8];
#pragma unroll
  for (int i = 0; i < MT8; ++i) xl[i] = xs + min(8 * i + gr, tokens - 1) * xs_stride + 16 * tq;

  float acc[NT][MT8][4];
  auto zero_acc = [&]() {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < MT8; ++i) acc[j][i][0] = acc[j][i][1] = acc[j][i][2] = acc[j][i][3] = 0.0f;
  };
  zero_acc();

  // The groups' partial tiles, summed in warp order: double-buffered (one barrier per group) where
  // two buffers fit the 48 KB of static shared memory that every architecture allows, else one
  // buffer and a second barrier after its reads (2 tiles x 16 tokens x 16 warps: 2 x 32 KB).
  constexpr int kE = NT * MT8 * 4;
  constexpr int kRedBufs = 2 * kWarps * kE * 32 * int(sizeof(float)) + 1024 <= 48 * 1024 ? 2 : 1;
  __shared__ float red[kRedBufs][kWarps][kE][32];
  int g_run = 0, s_run = 0;  // the group / unit slot of the unit run next
  // One unit from slot `sl` (then refilled D units ahead); at a group's last slot, its output.
  auto run_unit = [&](TcSlot<NT, kBlock>& sl) {
    const int unit = warp + kWarps * s_run;
    if (unit < units) {
      uint4 xv[MT8][2];
#pragma unroll
      for (int i = 0; i < MT8; ++i) {
        xv[i][0] = *reinterpret_cast<const uint4*>(xl[i] + kTcUnitK * unit);
        xv[i][1] = *reinterpret_cast<const uint4*>(xl[i] + kTcUnitK * unit + 8);
      }
      // The unit's four MMAs into s[MT8][4] (acc, or the unit's partial sums with block scales).
      auto mma_tile = [&](int j, float (&s)[MT8][4]) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const uint32_t lo = Word(sl.lo[j], q), hi = Word(sl.hi[j], q);
          const uint32_t a0 = Fp8x2ToHalf2(lo & 0xFFFFu), a2 = Fp8x2ToHalf2(lo >> 16);
          const uint32_t a1 = Fp8x2ToHalf2(hi & 0xFFFFu), a3 = Fp8x2ToHalf2(hi >> 16);
#pragma unroll
          for (int i = 0; i < MT8; ++i) {
            const uint4& xb = xv[i][q >> 1];
            Mma16816<__half>(s[i], a0, a1, a2, a3, (q & 1) ? xb.z : xb.x, (q & 1) ? xb.w : xb.y);
          }
        }
      };
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        if constexpr (kBlock) {
          float part[MT8][4];
#pragma unroll
          for (int i = 0; i < MT8; ++i) part[i][0] = part[i][1] = part[i][2] = part[i][3] = 0.0f;
          mma_tile(j, part);
#pragma unroll
          for (int i = 0; i < MT8; ++i) {
            acc[j][i][0] = fmaf(part[i][0], sl.s_lo[j], acc[j][i][0]);
            acc[j][i][1] = fmaf(part[i][1], sl.s_lo[j], acc[j][i][1]);
            acc[j][i][2] = fmaf(part[i][2], sl.s_hi[j], acc[j][i][2]);
            acc[j][i][3] = fmaf(part[i][3], sl.s_hi[j], acc[j][i][3]);
          }
        } else {
          mma_tile(j, acc[j]);
        }
      }
    }
    load_next(sl);
    if (s_run + 1 < per_tile) {
      ++s_run;
      return;
    }
    // The group's end (the same step in every warp): c[r] of lane (gr, tq) in tile j, token
    // tile i is row r0 + 16 j + gr + 8 (r / 2), token m0 + 8 i + 2 tq + r % 2.
    const int buf = kRedBufs == 2 ? (g_run & 1) : 0;
    const float* a = &acc[0][0][0];
#pragma unroll
    for (int e = 0; e < kE; ++e) red[buf][warp][e][lane] = a[e];
    zero_acc();
    __syncthreads();
    const int r0 = (int(blockIdx.x) + int(gridDim.x) * g_run) * 16 * NT;
    for (int idx = threadIdx.x; idx < kE * 32; idx += kWarps * 32) {
      const int e = idx >> 5, ln = idx & 31;
      const int j = e / (MT8 * 4), i = (e >> 2) % MT8, r = e & 3;
      const int tok = 8 * i + 2 * (ln & 3) + (r & 1);
      const int row = r0 + 16 * j + (ln >> 2) + 8 * (r >> 1);
      if (tok >= tokens || row >= n) continue;
      float v = 0.0f;
#pragma unroll
      for (int ww = 0; ww < kWarps; ++ww) v += red[buf][ww][e][ln];
      // As linear_fp8_ref_kernel: (sum * w_scale) * s_x + bias.
      if (!kBlock) v *= w_scale[row];
      v *= row_s[tok];
      if (bias) v += LoadF(bias, row);
      y[int64_t(m0 + tok) * n + row] = StoreT<T>(v);
    }
    if constexpr (kRedBufs == 1) __syncthreads();  // the next group's writes wait for these reads
    s_run = 0, ++g_run;
  };
  // `i + d < total` is the same for every warp of the CTA (the barrier in run_unit).
  for (int i = 0; i < total; i += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (i + d < total) run_unit(slot[d]);
    }
  }
}

int TcXsStride(int64_t k) { return static_cast<int>((k + kTcUnitK - 1) / kTcUnitK * kTcUnitK + kTcSkewHalves); }
size_t TcSmemBytes(int64_t m, int64_t k) {
  const int64_t rows = std::min<int64_t>(m, m <= 8 ? 8 : 16);
  return static_cast<size_t>(rows) * TcXsStride(k) * sizeof(__half);
}

// grid.x: the row-tile groups spread evenly over the CTAs that fit at once (occupancy at this
// shared memory), so that X is quantized once per resident CTA rather than once per group;
// max_ctas > 0 caps it (PYQUANT_FP8_TC_CTAS, tests: several groups per CTA on small layers).
template <typename T, int MT8, int NT, int kWarps, int D, int kMinCtas, bool kBlock>
cudaError_t LaunchTc(const LinearFp8Problem& p, int bs_log2, int max_ctas, PdlMode pdl, cudaStream_t stream) {
  auto kernel = fp8_gemv_tc_kernel<T, MT8, NT, kWarps, D, kMinCtas, kBlock>;
  // Over 48 KB of dynamic shared memory needs an opt-in, once per device and instance.
  static std::atomic<uint64_t> smem_set_on{0};
  cudaError_t e =
      SetFuncAttributeOnce(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kFp8GemvTcMaxSmem, smem_set_on);
  if (e != cudaSuccess) return e;
  const size_t smem = TcSmemBytes(p.m, p.k);
  const int64_t groups = (p.n + 16 * NT - 1) / (16 * NT);
  int64_t ctas = groups;
  if (max_ctas > 0) {
    ctas = std::min<int64_t>(groups, max_ctas);
  } else {
    const int64_t slots =
        std::max(1, ResidentCtas(reinterpret_cast<const void*>(kernel), 32 * kWarps, static_cast<int>(smem)));
    const int64_t per_cta = (groups + slots - 1) / slots;
    ctas = (groups + per_cta - 1) / per_cta;
  }
  const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>((p.m + 8 * MT8 - 1) / (8 * MT8)));
  const int st = p.static_scale ? 1 : 0;
  return LaunchWithPdlSmem(kernel, grid, dim3(32 * kWarps), smem, stream, pdl.launch, static_cast<const T*>(p.x), st,
                           p.x_scale, p.w, p.w_scale, static_cast<const T*>(p.bias), static_cast<T*>(p.y),
                           static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), bs_log2,
                           static_cast<int>(p.n_scale_blocks), TcXsStride(p.k), pdl.weights_early);
}

template <typename T, int MT8, int NT, int kWarps, int D, int kMinCtas>
cudaError_t LaunchTcScales(const LinearFp8Problem& p, int bs_log2, int max_ctas, PdlMode pdl, cudaStream_t stream) {
  return p.block_size != 0 ? LaunchTc<T, MT8, NT, kWarps, D, kMinCtas, true>(p, bs_log2, max_ctas, pdl, stream)
                           : LaunchTc<T, MT8, NT, kWarps, D, kMinCtas, false>(p, bs_log2, max_ctas, pdl, stream);
}

// (NT, warps, units in flight, CTAs per SM by registers) per configuration: kFp8GemvTcConfigs'
// comment (linear_fp8_gemv.h).
template <typename T, int MT8>
cudaError_t LaunchTcConfig(int config, const LinearFp8Problem& p, int bs_log2, int max_ctas, PdlMode pdl,
                           cudaStream_t stream) {
  switch (config) {
    case 1: return LaunchTcScales<T, MT8, 1, 8, 4, 3>(p, bs_log2, max_ctas, pdl, stream);
    case 2: return LaunchTcScales<T, MT8, 1, 16, 4, 2>(p, bs_log2, max_ctas, pdl, stream);
    case 3: return LaunchTcScales<T, MT8, 2, 16, 4, 1>(p, bs_log2, max_ctas, pdl, stream);
    case 4: return LaunchTcScales<T, MT8, 2, 8, 4, 2>(p, bs_log2, max_ctas, pdl, stream);
    case 5: return LaunchTcScales<T, MT8, 1, 16, 4, 1>(p, bs_log2, max_ctas, pdl, stream);
    default: return LaunchTcScales<T, MT8, 1, 4, 4, 6>(p, bs_log2, max_ctas, pdl, stream);
  }
}

}  // namespace

bool Fp8GemvTcFits(const LinearFp8Problem& p, size_t elem_bytes) {
  const bool aligned = (reinterpret_cast<uintptr_t>(p.x) & 15) == 0 && (reinterpret_cast<uintptr_t>(p.w) & 15) == 0;
  const bool scales_ok = p.block_size == 0 || (p.block_size >= kTcUnitK && (p.block_size & (p.block_size - 1)) == 0);
  return elem_bytes == 2 && !p.weight_only && p.m >= 1 && p.k % 16 == 0 && aligned && scales_ok &&
         (p.m + 15) / 16 <= 65535 && p.n * p.k < (int64_t{1} << 31) && p.m * p.k < (int64_t{1} << 31) &&
         p.m * p.n < (int64_t{1} << 31) && TcSmemBytes(p.m, p.k) <= kFp8GemvTcMaxSmem;
}

template <typename T>
cudaError_t LaunchFp8GemvTc(const LinearFp8Problem& p, int config, int max_ctas, PdlMode pdl, cudaStream_t stream) {
  if (!Fp8GemvTcFits(p, sizeof(T))) return cudaErrorInvalidValue;
  if (config < 0) config = kFp8GemvTcDefaultConfig;
  const int bs_log2 = CeilLog2(p.block_size);  // 0 for per-channel scales (block_size 0)
  return p.m <= 8 ? LaunchTcConfig<T, 1>(config, p, bs_log2, max_ctas, pdl, stream)
                  : LaunchTcConfig<T, 2>(config, p, bs_log2, max_ctas, pdl, stream);
}

template cudaError_t LaunchFp8GemvTc<__half>(const LinearFp8Problem&, int, int, PdlMode, cudaStream_t);
template cudaError_t LaunchFp8GemvTc<__nv_bfloat16>(const LinearFp8Problem&, int, int, PdlMode, cudaStream_t);

}  // namespace pyquant
