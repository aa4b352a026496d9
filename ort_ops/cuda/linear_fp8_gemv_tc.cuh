// Device pieces shared by LinearFp8's two tensor-core fused GEMVs: "tc" (linear_fp8_gemv_tc_impl.cu,
// a CTA's warps split each row-tile group's K) and "tcw" (linear_fp8_gemv_tcw_impl.cu, warps own
// their row tiles). The unit of work, the k-order trick and the X layout in shared memory are
// described once, at the top of linear_fp8_gemv_tc_impl.cu.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/linear_fp8_impl.cuh"

namespace pyquant {
namespace fp8_tc_detail {

using namespace cuda_detail;
using namespace fp8_detail;

constexpr int kTcUnitK = 64;      // k per unit: one lane loads 16 of them per row
constexpr int kTcSkewHalves = 8;  // 16 bytes between consecutive shared X rows' banks

// Halves per shared X row: K rounded up to whole units (zero-filled) plus the skew.
inline int TcXsStride(int64_t k) { return static_cast<int>((k + kTcUnitK - 1) / kTcUnitK * kTcUnitK + kTcSkewHalves); }
// Shared memory of a CTA whose grid row holds min(M, 8) tokens (M <= 8) or min(M, 16).
inline size_t TcSmemBytes(int64_t m, int64_t k) {
  const int64_t rows = std::min<int64_t>(m, m <= 8 ? 8 : 16);
  return static_cast<size_t>(rows) * TcXsStride(k) * sizeof(__half);
}

// One unit's loads for NT row tiles: the lane's 16 bytes of rows gr (lo) and gr + 8 (hi), and
// with per-K-block scales their block's scales.
template <int NT, bool kBlock>
struct TcSlot {
  uint4 lo[NT], hi[NT];
  float s_lo[kBlock ? NT : 1], s_hi[kBlock ? NT : 1];
};

// Loads unit `unit` (< ceil(K / 64)) of the NT row tiles from row r0 into sl: lane (gr, tq) reads
// rows r0 + 16 j + gr (+ 8), clamped to N - 1 (never stored), at k = 64 unit + 16 tq; pieces
// past K (only in the tail unit; K % 16 == 0) read as zeros.
//   w [n, k] e4m3, w_scale [n, nsb] float (per-K-block scales, blocks of 2^bs_log2 >= 64 k).
template <int NT, bool kBlock>
__device__ __forceinline__ void TcLoadUnit(TcSlot<NT, kBlock>& sl, const uint8_t* __restrict__ w,
                                           const float* __restrict__ w_scale, int r0, int unit, int n, int k,
                                           int bs_log2, int nsb, int gr, int tq) {
  const int kk = kTcUnitK * unit + 16 * tq;  // this lane's first k
  const bool kin = kk < k;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
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

// The four m16n8k16 MMAs of tile j of a loaded unit into s[MT8][4]: A = the unit's e4m3 weights
// as fp16 pairs (one cvt per pair), B = xv[i][0 / 1], the lane's two 16-byte words of shared X
// (token tile i) at the unit.
template <int MT8, int NT, bool kBlock>
__device__ __forceinline__ void TcMmaTile(const TcSlot<NT, kBlock>& sl, int j, const uint4 (&xv)[MT8][2],
                                          float (&s)[MT8][4]) {
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
}

// Tile j of a unit added into acc[j]: directly, or (per-K-block scales) as fp32 partial sums
// times the rows' block scales.
template <int MT8, int NT, bool kBlock>
__device__ __forceinline__ void TcAccumulateTile(const TcSlot<NT, kBlock>& sl, int j, const uint4 (&xv)[MT8][2],
                                                 float (&acc)[MT8][4]) {
  if constexpr (kBlock) {
    float part[MT8][4];
#pragma unroll
    for (int i = 0; i < MT8; ++i) part[i][0] = part[i][1] = part[i][2] = part[i][3] = 0.0f;
    TcMmaTile<MT8, NT, kBlock>(sl, j, xv, part);
#pragma unroll
    for (int i = 0; i < MT8; ++i) {
      acc[i][0] = fmaf(part[i][0], sl.s_lo[j], acc[i][0]);
      acc[i][1] = fmaf(part[i][1], sl.s_lo[j], acc[i][1]);
      acc[i][2] = fmaf(part[i][2], sl.s_hi[j], acc[i][2]);
      acc[i][3] = fmaf(part[i][3], sl.s_hi[j], acc[i][3]);
    }
  } else {
    TcMmaTile<MT8, NT, kBlock>(sl, j, xv, acc);
  }
}

// The CTA's X phase (every thread calls it, after the PDL wait): the row scales of tokens
// m0 .. m0 + tokens - 1 (amax over the whole row, NaN ignored, then the quantizers' rule; or the
// static scale) into inv_s / row_s, then xs[t][kk] = e4m3(x * inv) as fp16 (exact), zeros from
// K to the last unit's end. Ends with a CTA barrier.
//   x [M, K] T; xs: tokens rows of xs_stride halves.
template <typename T, int kTok, int kWarps>
__device__ __forceinline__ void TcQuantizeX(const T* __restrict__ x, int static_scale, float x_scale, int m0,
                                            int tokens, int k, int units, __half* xs, int xs_stride, int lane, int warp,
                                            float (&red_max)[kTok][kWarps], float* inv_s, float* row_s) {
  const int vecs = k / 8;  // 16-byte vectors of X per row
  if (static_scale) {
    if (threadIdx.x < kTok) inv_s[threadIdx.x] = 1.0f / x_scale, row_s[threadIdx.x] = x_scale;
  } else {
    CtaDynamicRowScales<T, kTok, kWarps, false>(x, m0, tokens, k, lane, warp, red_max, inv_s, row_s);
  }
  __syncthreads();
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
  __syncthreads();
}

// One output element as linear_fp8_ref_kernel: (sum * w_scale) * s_x + bias (per-K-block scales
// were applied to the unit sums).
template <typename T, bool kBlock>
__device__ __forceinline__ void TcStoreOutput(float v, int row, int tok_global, float s_x,
                                              const float* __restrict__ w_scale, const T* __restrict__ bias,
                                              T* __restrict__ y, int n) {
  if (!kBlock) v *= w_scale[row];
  v *= s_x;
  if (bias) v += LoadF(bias, row);
  y[int64_t(tok_global) * n + row] = StoreT<T>(v);
}

}  // namespace fp8_tc_detail
}  // namespace pyquant
