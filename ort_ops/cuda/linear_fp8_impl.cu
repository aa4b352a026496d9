// LinearFp8 CUDA kernels and launchers.
//
// Stage 1, quantize_rows_fp8_kernel: one block per row of X: amax (NaN ignored), the scale rule
//   of docs/ops.md (DynamicFp8RowScale, identical float32 arithmetic), saturating RNE cast.
// Stage 2, one of
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

#include <type_traits>

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

namespace {

using namespace cuda_detail;

struct Fp8Geom {
  int m, n, k;
  int n_chunks;      // ceil(K / 64)
  int bs_log2;       // log2(block_size) when per-block scales, else unused
  int n_scale_blocks;
};

// Two e4m3 bytes (low = lower k) -> fp16x2, exact.
__device__ __forceinline__ uint32_t Fp8x2ToHalf2(uint32_t v16) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v16), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

__device__ __forceinline__ uint32_t Word4(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

}  // namespace

// grid = (ceil(N / 8), ceil(M / (16 * MT))), block = 32 * kWarps.
//   xq [M, K] e4m3 (quantized X), s_x [M] float, w [N, K] e4m3, w_scale [N, n_scale_blocks]
//   float, bias [N] T or nullptr, y [M, N] T. kBlockScale: w_scale per 2^bs_log2-wide K block.
template <typename T, int MT, int kWarps, bool kBlockScale>
__global__ void __launch_bounds__(32 * kWarps) fp8_mma_kernel(const uint8_t* __restrict__ xq,
                                                              const float* __restrict__ s_x,
                                                              const uint8_t* __restrict__ w,
                                                              const float* __restrict__ w_scale,
                                                              const T* __restrict__ bias, T* __restrict__ y,
                                                              Fp8Geom g) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gr = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * 8;
  const int col = n0 + gr;  // this thread's W row
  const int m0 = blockIdx.y * 16 * MT;
  float acc[MT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

  constexpr int U = MT == 1 ? 8 : 2;  // chunks in flight per warp (16 bytes of W each)
  for (int c0 = warp; c0 < g.n_chunks; c0 += U * kWarps) {
    uint4 wv[U];
    uint4 xv[U][MT][2];
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
      const int kb = (c0 + uu * kWarps) * 64 + 16 * t;
      const bool kin = c0 + uu * kWarps < g.n_chunks && kb < g.k;  // K % 16 == 0: all 16 or none
      wv[uu] = (kin && col < g.n) ? LoadStream16(w + int64_t(col) * g.k + kb) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = m0 + 16 * i + gr + 8 * h;
          xv[uu][i][h] = (kin && row < g.m) ? LoadCached16(xq + int64_t(row) * g.k + kb) : make_uint4(0, 0, 0, 0);
        }
      }
    }
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
      float part[MT][4];
      float(&dst)[MT][4] = kBlockScale ? part : acc;
      if (kBlockScale) {
#pragma unroll
        for (int i = 0; i < MT; ++i) part[i][0] = part[i][1] = part[i][2] = part[i][3] = 0.0f;
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint32_t ws = Word4(wv[uu], s);
        const uint32_t b0 = Fp8x2ToHalf2(ws & 0xFFFFu), b1 = Fp8x2ToHalf2(ws >> 16);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          const uint32_t x0 = Word4(xv[uu][i][0], s), x1 = Word4(xv[uu][i][1], s);
          Mma16816<__half>(dst[i], Fp8x2ToHalf2(x0 & 0xFFFFu), Fp8x2ToHalf2(x1 & 0xFFFFu), Fp8x2ToHalf2(x0 >> 16),
                           Fp8x2ToHalf2(x1 >> 16), b0, b1);
        }
      }
      if (kBlockScale) {
        const int chunk = c0 + uu * kWarps;
        if (chunk < g.n_chunks) {
          const int blk = (chunk * 64) >> g.bs_log2;
          const int c = n0 + 2 * t;
          const float s0 = c < g.n ? w_scale[int64_t(c) * g.n_scale_blocks + blk] : 0.0f;
          const float s1 = c + 1 < g.n ? w_scale[int64_t(c + 1) * g.n_scale_blocks + blk] : 0.0f;
#pragma unroll
          for (int i = 0; i < MT; ++i) {
            acc[i][0] = fmaf(part[i][0], s0, acc[i][0]);
            acc[i][1] = fmaf(part[i][1], s1, acc[i][1]);
            acc[i][2] = fmaf(part[i][2], s0, acc[i][2]);
            acc[i][3] = fmaf(part[i][3], s1, acc[i][3]);
          }
        }
      }
    }
  }

  __shared__ float red[kWarps][MT * 4][32];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) red[warp][i * 4 + r][lane] = acc[i][r];
  __syncthreads();
  for (int e = warp; e < MT * 4; e += kWarps) {
    float v = 0.0f;
#pragma unroll
    for (int ww = 0; ww < kWarps; ++ww) v += red[ww][e][lane];
    const int i = e >> 2, r = e & 3;
    const int row = m0 + 16 * i + gr + (r >= 2 ? 8 : 0);
    const int c = n0 + 2 * t + (r & 1);
    if (row < g.m && c < g.n) {
      if (!kBlockScale) v *= w_scale[c];
      v *= s_x[row];
      if (bias) v += LoadF(bias, c);
      y[int64_t(row) * g.n + c] = StoreT<T>(v);
    }
  }
}

size_t LinearFp8WorkspaceBytes(const LinearFp8Problem& p) {
  return AlignUp(static_cast<size_t>(p.m * p.k)) + AlignUp(static_cast<size_t>(p.m) * sizeof(float));
}

namespace {

bool Fp8FastPath(const LinearFp8Problem& p) {
  if (p.k % 16 != 0) return false;                          // 16-byte rows of W and xq
  if (p.block_size != 0 && p.block_size < 64) return false;  // a 64-wide chunk in one scale block
  if ((reinterpret_cast<uintptr_t>(p.w) & 15) != 0) return false;
  if (p.m * p.k >= (int64_t{1} << 31) || p.n * p.k >= (int64_t{1} << 31) || p.m * p.n >= (int64_t{1} << 31)) return false;
  if ((p.m + 31) / 32 > 65535) return false;
  return true;
}

template <typename T, int MT, bool kBlock>
void LaunchFp8Mma(const LinearFp8Problem& p, const uint8_t* xq, const float* s_x, const Fp8Geom& g,
                  cudaStream_t stream) {
  dim3 grid(static_cast<unsigned>((p.n + 7) / 8), static_cast<unsigned>((p.m + 16 * MT - 1) / (16 * MT)));
  fp8_mma_kernel<T, MT, 4, kBlock><<<grid, 128, 0, stream>>>(xq, s_x, p.w, p.w_scale, static_cast<const T*>(p.bias),
                                                             static_cast<T*>(p.y), g);
}

}  // namespace

template <typename T>
cudaError_t LaunchLinearFp8Impl(const LinearFp8Problem& p, Fp8Workspace ws, cudaStream_t stream, bool force_ref) {
  if (p.m == 0) return cudaSuccess;
  if (p.m > 65535 || ws.bytes < LinearFp8WorkspaceBytes(p)) return cudaErrorInvalidConfiguration;
  uint8_t* xq = static_cast<uint8_t*>(ws.data);
  float* s_x = reinterpret_cast<float*>(static_cast<char*>(ws.data) + AlignUp(static_cast<size_t>(p.m * p.k)));
  quantize_rows_fp8_kernel<T><<<static_cast<unsigned>(p.m), 256, 0, stream>>>(
      static_cast<const T*>(p.x), xq, s_x, p.k, p.static_scale ? 1 : 0, p.x_scale);
  if (!force_ref && Fp8FastPath(p)) {
    Fp8Geom g;
    g.m = static_cast<int>(p.m);
    g.n = static_cast<int>(p.n);
    g.k = static_cast<int>(p.k);
    g.n_chunks = static_cast<int>((p.k + 63) / 64);
    g.bs_log2 = 0;
    while (p.block_size && (int64_t{1} << g.bs_log2) < p.block_size) ++g.bs_log2;
    g.n_scale_blocks = static_cast<int>(p.n_scale_blocks);
    const bool block = p.block_size != 0;
    if (p.m <= 16) {
      block ? LaunchFp8Mma<T, 1, true>(p, xq, s_x, g, stream) : LaunchFp8Mma<T, 1, false>(p, xq, s_x, g, stream);
    } else {
      block ? LaunchFp8Mma<T, 2, true>(p, xq, s_x, g, stream) : LaunchFp8Mma<T, 2, false>(p, xq, s_x, g, stream);
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
cudaError_t LaunchLinearFp8(const LinearFp8Problem& p, Fp8Workspace ws, cudaStream_t stream) {
  return LaunchLinearFp8Impl<T>(p, ws, stream, false);
}
template <typename T>
cudaError_t LaunchLinearFp8Ref(const LinearFp8Problem& p, Fp8Workspace ws, cudaStream_t stream) {
  return LaunchLinearFp8Impl<T>(p, ws, stream, true);
}

#define PYQUANT_INSTANTIATE(T)                                                                     \
  template cudaError_t LaunchLinearFp8<T>(const LinearFp8Problem&, Fp8Workspace, cudaStream_t); \
  template cudaError_t LaunchLinearFp8Ref<T>(const LinearFp8Problem&, Fp8Workspace, cudaStream_t);
PYQUANT_INSTANTIATE(float)
PYQUANT_INSTANTIATE(__half)
PYQUANT_INSTANTIATE(__nv_bfloat16)
#undef PYQUANT_INSTANTIATE

}  // namespace pyquant
