// MatMulInt4 CUDA kernels. Device helpers shared by every kernel variant live here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "layout/int4_block.h"

namespace pyquant {
namespace cuda_detail {

template <typename T>
__device__ __forceinline__ float LoadF(const T* p, int64_t i);
template <>
__device__ __forceinline__ float LoadF<float>(const float* p, int64_t i) { return p[i]; }
template <>
__device__ __forceinline__ float LoadF<__half>(const __half* p, int64_t i) { return __half2float(p[i]); }
template <>
__device__ __forceinline__ float LoadF<__nv_bfloat16>(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}

template <typename T>
__device__ __forceinline__ T StoreT(float v);
template <>
__device__ __forceinline__ float StoreT<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half StoreT<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 StoreT<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

}  // namespace cuda_detail
}  // namespace pyquant
