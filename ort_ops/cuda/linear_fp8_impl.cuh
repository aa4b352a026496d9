// LinearFp8 device helpers shared by linear_fp8_impl.cu (quantizers, mma.sync kernels),
// linear_fp8_gemv_impl.cu (the fused decode GEMV) and linear_fp8_weight_only_impl.cu: e4m3
// conversions, the activation-quantization arithmetic of docs/ops.md, 16-byte vector unpacking,
// the mma kernels' per-block scaling and weight prefetch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/matmul_int4_impl.cuh"
#include "ops/linear_fp8.h"  // Fp8RowScale, DynamicFp8RowScale

namespace pyquant {
namespace fp8_detail {

__device__ __forceinline__ float Fp8ToFloat(uint8_t v) {
  __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3);
  return __half2float(__half(h));
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// 16 bytes of T -> kE floats (exact conversions).
template <typename T>
struct Vec16 {
  static constexpr int kE = 16 / sizeof(T);
};
__device__ __forceinline__ void ToFloats(const uint4& v, float (&f)[4], const float*) {
  f[0] = __uint_as_float(v.x), f[1] = __uint_as_float(v.y), f[2] = __uint_as_float(v.z), f[3] = __uint_as_float(v.w);
}
__device__ __forceinline__ void ToFloats(const uint4& v, float (&f)[8], const __half*) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    f[2 * i] = p.x, f[2 * i + 1] = p.y;
  }
}
__device__ __forceinline__ void ToFloats(const uint4& v, float (&f)[8], const __nv_bfloat16*) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // bf16 -> float is a 16-bit shift: exact.
    f[2 * i] = __uint_as_float(w[i] << 16), f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

template <typename T>
__device__ __forceinline__ float VecAbsMax(const uint4& v, float amax) {
  float f[Vec16<T>::kE];
  ToFloats(v, f, static_cast<const T*>(nullptr));
#pragma unroll
  for (int i = 0; i < Vec16<T>::kE; ++i) amax = fmaxf(amax, fabsf(f[i]));  // fmaxf ignores NaN
  return amax;
}

// Two floats -> two e4m3 bytes (low byte = a): x * inv, RNE, saturating (NaN stays NaN); the
// same cvt as __nv_cvt_float_to_fp8(.., __NV_SATFINITE, __NV_E4M3) of the scalar kernel.
__device__ __forceinline__ uint32_t Quant2(float a, float b, float inv) {
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(a * inv, b * inv), __NV_SATFINITE, __NV_E4M3));
}

// Quantizes one 16-byte vector of T and stores its kE bytes at dst (kE-byte aligned).
template <typename T>
__device__ __forceinline__ void QuantStore(const uint4& v, float inv, uint8_t* dst) {
  float f[Vec16<T>::kE];
  ToFloats(v, f, static_cast<const T*>(nullptr));
  if constexpr (Vec16<T>::kE == 8) {
    uint2 o;
    o.x = Quant2(f[0], f[1], inv) | (Quant2(f[2], f[3], inv) << 16);
    o.y = Quant2(f[4], f[5], inv) | (Quant2(f[6], f[7], inv) << 16);
    *reinterpret_cast<uint2*>(dst) = o;
  } else {
    *reinterpret_cast<uint32_t*>(dst) = Quant2(f[0], f[1], inv) | (Quant2(f[2], f[3], inv) << 16);
  }
}

// Dynamic per-token scales of X's rows row0 .. row0 + rows - 1 (row row0 + r at x + (row0 + r) * k,
// 16-byte aligned, K % 8 == 0; rows <= kRows): each row's amax over K across the CTA's kWarps warps
// (NaN ignored by fmaxf; red_max: shared scratch), then the quantizers' rule (DynamicFp8RowScale)
// into the shared inv_s[r] / row_s[r]. Every thread of the CTA calls it; the caller syncs before
// reading the scales. The amax pass of the fused and tc GEMVs (linear_fp8_gemv_impl.cu,
// linear_fp8_gemv_tc_impl.cu). kAllRows: rows == kRows (the fused GEMV's compile-time M, its row
// loop unrolled); row0 and lane / warp are passed in so that both kernels' SASS is what it was
// when each was written out in place.
template <typename T, int kRows, int kWarps, bool kAllRows>
__device__ __forceinline__ void CtaDynamicRowScales(const T* __restrict__ x, int row0, int rows, int k, int lane,
                                                    int warp, float (&red_max)[kRows][kWarps], float* inv_s,
                                                    float* row_s) {
  const int vecs = k / (16 / int(sizeof(T)));
  auto row_amax = [&](int r) {
    float amax = 0.0f;
    for (int i = threadIdx.x; i < vecs; i += kWarps * 32)
      amax = VecAbsMax<T>(cuda_detail::LoadCached16(x + int64_t(row0 + r) * k + 8 * i), amax);
    amax = WarpMax(amax);
    if (lane == 0) red_max[r][warp] = amax;
  };
  if constexpr (kAllRows) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) row_amax(r);
  } else {
    for (int r = 0; r < rows; ++r) row_amax(r);
  }
  __syncthreads();
  if (threadIdx.x < rows) {
    float v = 0.0f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) v = fmaxf(v, red_max[threadIdx.x][i]);
    const Fp8RowScale rs = DynamicFp8RowScale(v);
    inv_s[threadIdx.x] = rs.inv;
    row_s[threadIdx.x] = rs.s_x;
  }
}

// Two e4m3 bytes (low = lower k) -> fp16x2, exact.
__device__ __forceinline__ uint32_t Fp8x2ToHalf2(uint32_t v16) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v16), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// The two mma.sync kernels (fp8_mma_kernel, linear_fp8_impl.cu; fp8_wo_mma_kernel,
// linear_fp8_weight_only_impl.cu) walk K in 64-wide chunks; thread (lane / 4, t = lane % 4) holds,
// in 8-channel tile j of the CTA's columns n0 .., the sums of columns c = n0 + 8 j + 2 t (values 0,
// 2) and c + 1 (values 1, 3) for MT m16 token tiles.
//
// Per-K-block weight scales: the fp32 sums `part` of chunk `chunk` times their block's scale
// (w_scale [n, n_scale_blocks] float, blocks of 2^bs_log2 >= 64 k), added into acc. Columns past
// N get scale 0; a chunk past the last adds nothing.
template <int MT, int NT>
__device__ __forceinline__ void AddBlockScaledChunk(float (&acc)[MT][NT][4], const float (&part)[MT][NT][4],
                                                    const float* __restrict__ w_scale, int n, int n_scale_blocks,
                                                    int bs_log2, int n_chunks, int chunk, int n0, int t) {
  if (chunk >= n_chunks) return;
  const int blk = (chunk * 64) >> bs_log2;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int c = n0 + 8 * j + 2 * t;
    const float s0 = c < n ? w_scale[int64_t(c) * n_scale_blocks + blk] : 0.0f;
    const float s1 = c + 1 < n ? w_scale[int64_t(c + 1) * n_scale_blocks + blk] : 0.0f;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      acc[i][j][0] = fmaf(part[i][j][0], s0, acc[i][j][0]);
      acc[i][j][1] = fmaf(part[i][j][1], s1, acc[i][j][1]);
      acc[i][j][2] = fmaf(part[i][j][2], s0, acc[i][j][2]);
      acc[i][j][3] = fmaf(part[i][j][3], s1, acc[i][j][3]);
    }
  }
}

// PDL (cuda/pdl.h), constant weights only: L2 prefetch of the first U chunks of chunk worker
// `worker` (chunks worker + uu * workers) of W rows col + 8 j, j < NT (w [n, k] e4m3), issued
// before the wait for the previous kernel.
template <int U, int NT>
__device__ __forceinline__ void PrefetchFirstChunks(const uint8_t* __restrict__ w, int n, int k, int n_chunks, int col,
                                                    int worker, int workers, int t) {
#pragma unroll
  for (int uu = 0; uu < U; ++uu) {
    const int chunk = worker + uu * workers;
    const int kb = chunk * 64 + 16 * t;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      if (chunk < n_chunks && kb < k && col + 8 * j < n) cuda_detail::PrefetchL2(w + int64_t(col + 8 * j) * k + kb);
    }
  }
}

}  // namespace fp8_detail
}  // namespace pyquant
