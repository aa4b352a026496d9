// MatMulInt4 CUDA kernels and launcher.
//
// matmul_int4_ref_kernel: the plain reference (one thread per output, float32 accumulation,
// reads the documented layout directly). It is correct for every shape and block size and is
// the ground truth the fast kernels are tested against on the device.
#include "cuda/matmul_int4.h"
#include "cuda/matmul_int4_impl.cuh"

namespace pyquant {

using cuda_detail::LoadF;
using cuda_detail::StoreT;

// x      [M, K]  T
// b      [N, n_blocks, block_size/2] uint8 (row n at b + n * row_bytes)
// scales [N, n_blocks] T
// zp     [N, ceil(n_blocks/2)] uint8 or nullptr (= 8)
// bias   [N] T or nullptr
// y      [M, N]  T
template <typename T>
__global__ void matmul_int4_ref_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b,
                                       const T* __restrict__ scales, const uint8_t* __restrict__ zp,
                                       const T* __restrict__ bias, T* __restrict__ y, int64_t m, int64_t n,
                                       int64_t k, int64_t block_size) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t row = blockIdx.y;
  if (col >= n || row >= m) return;
  const int64_t nb = Int4NumBlocks(k, block_size);
  const uint8_t* codes = b + col * Int4RowBytes(k, block_size);
  const uint8_t* zp_row = zp ? zp + col * Int4ZeroPointRowBytes(k, block_size) : nullptr;
  const T* xr = x + row * k;
  float acc = 0.0f;
  for (int64_t blk = 0; blk < nb; ++blk) {
    const float s = LoadF(scales, col * nb + blk);
    const float z = zp_row ? float(Int4ZeroPointAt(zp_row, blk)) : float(kInt4SymmetricZeroPoint);
    const int64_t k0 = blk * block_size;
    const int64_t k1 = min(k, k0 + block_size);
    float part = 0.0f;
    for (int64_t kk = k0; kk < k1; ++kk) part += LoadF(xr, kk) * (float(Int4CodeAt(codes, kk)) - z);
    acc += part * s;
  }
  if (bias) acc += LoadF(bias, col);
  y[row * n + col] = StoreT<T>(acc);
}

template <typename T>
cudaError_t LaunchMatMulInt4(const MatMulInt4Problem& p, cudaStream_t stream) {
  if (p.m == 0) return cudaSuccess;
  if (p.m > 65535) return cudaErrorInvalidConfiguration;
  const int threads = 128;
  dim3 grid(static_cast<unsigned>((p.attrs.n + threads - 1) / threads), static_cast<unsigned>(p.m));
  matmul_int4_ref_kernel<T><<<grid, threads, 0, stream>>>(
      static_cast<const T*>(p.x), p.b, static_cast<const T*>(p.scales), p.zero_points,
      static_cast<const T*>(p.bias), static_cast<T*>(p.y), p.m, p.attrs.n, p.attrs.k, p.attrs.block_size);
  return cudaGetLastError();
}

template cudaError_t LaunchMatMulInt4<float>(const MatMulInt4Problem&, cudaStream_t);
template cudaError_t LaunchMatMulInt4<__half>(const MatMulInt4Problem&, cudaStream_t);
template cudaError_t LaunchMatMulInt4<__nv_bfloat16>(const MatMulInt4Problem&, cudaStream_t);

}  // namespace pyquant
