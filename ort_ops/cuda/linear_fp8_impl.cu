// LinearFp8 CUDA kernels and launcher.
//
// Stage 1, quantize_rows_fp8_kernel: one block per row of X: amax (NaN ignored), the scale rule
//   of docs/ops.md (DynamicFp8RowScale, identical float32 arithmetic), saturating RNE cast.
// Stage 2, linear_fp8_ref_kernel: the plain reference GEMM, one thread per output.
#include <cuda_fp8.h>

#include "cuda/linear_fp8.h"
#include "cuda/matmul_int4_impl.cuh"

namespace pyquant {

using cuda_detail::LoadF;
using cuda_detail::StoreT;

namespace {

__device__ __forceinline__ float Fp8ToFloat(uint8_t v) {
  __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3);
  return __half2float(__half(h));
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

size_t AlignUp(size_t v) { return (v + 255) & ~size_t{255}; }

}  // namespace

// x [M, K] T -> xq [M, K] e4m3 bytes, s_x [M] float.
template <typename T>
__global__ void quantize_rows_fp8_kernel(const T* __restrict__ x, uint8_t* __restrict__ xq, float* __restrict__ s_x,
                                         int64_t k, int static_scale, float x_scale) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * k;
  __shared__ float warp_max[32];
  __shared__ float row_inv, row_s;
  if (static_scale) {
    if (threadIdx.x == 0) {
      row_inv = 1.0f / x_scale;
      row_s = x_scale;
    }
  } else {
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) amax = fmaxf(amax, fabsf(LoadF(xr, i)));
    amax = WarpMax(amax);
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
    __syncthreads();
    if (threadIdx.x < 32) {
      float v = threadIdx.x < (blockDim.x >> 5) ? warp_max[threadIdx.x] : 0.0f;
      v = WarpMax(v);
      if (threadIdx.x == 0) {
        // DynamicFp8RowScale (ops/linear_fp8.h), same float32 operations.
        row_inv = v == 0.0f ? 1.0f : kFp8E4M3Max / v;
        row_s = v == 0.0f ? 1.0f : v / kFp8E4M3Max;
      }
    }
  }
  __syncthreads();
  const float inv = row_inv;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    xq[row * k + i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(LoadF(xr, i) * inv, __NV_SATFINITE, __NV_E4M3));
  }
  if (threadIdx.x == 0) s_x[row] = row_s;
}

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

size_t LinearFp8WorkspaceBytes(const LinearFp8Problem& p) {
  return AlignUp(static_cast<size_t>(p.m * p.k)) + AlignUp(static_cast<size_t>(p.m) * sizeof(float));
}

template <typename T>
cudaError_t LaunchLinearFp8(const LinearFp8Problem& p, Fp8Workspace ws, cudaStream_t stream) {
  if (p.m == 0) return cudaSuccess;
  if (p.m > 65535 || ws.bytes < LinearFp8WorkspaceBytes(p)) return cudaErrorInvalidConfiguration;
  uint8_t* xq = static_cast<uint8_t*>(ws.data);
  float* s_x = reinterpret_cast<float*>(static_cast<char*>(ws.data) + AlignUp(static_cast<size_t>(p.m * p.k)));
  quantize_rows_fp8_kernel<T><<<static_cast<unsigned>(p.m), 256, 0, stream>>>(
      static_cast<const T*>(p.x), xq, s_x, p.k, p.static_scale ? 1 : 0, p.x_scale);
  const int threads = 128;
  dim3 grid(static_cast<unsigned>((p.n + threads - 1) / threads), static_cast<unsigned>(p.m));
  linear_fp8_ref_kernel<T><<<grid, threads, 0, stream>>>(xq, s_x, p.w, p.w_scale, static_cast<const T*>(p.bias),
                                                         static_cast<T*>(p.y), p.m, p.n, p.k, p.block_size,
                                                         p.n_scale_blocks);
  return cudaGetLastError();
}

template cudaError_t LaunchLinearFp8<float>(const LinearFp8Problem&, Fp8Workspace, cudaStream_t);
template cudaError_t LaunchLinearFp8<__half>(const LinearFp8Problem&, Fp8Workspace, cudaStream_t);
template cudaError_t LaunchLinearFp8<__nv_bfloat16>(const LinearFp8Problem&, Fp8Workspace, cudaStream_t);

}  // namespace pyquant
