// Stage 1 of LinearFp8 (linear_fp8_quantize.h), activation quantization: amax (NaN ignored), the
// scale rule of docs/ops.md (DynamicFp8RowScale, identical float32 arithmetic), saturating RNE cast.
// Two kernels:
//   quantize_rows_vec_kernel (16-byte loads, the row held in registers so X is read once; a warp
//     per row, 8 rows per CTA, for M > 16 with rows of up to 256 bytes per lane (K <= 4096 fp16);
//     a 512-thread CTA per row for M <= 16, so a single long row is not
//     one-thread-per-16-elements latency-bound (every load is issued before any use), and for
//     longer rows at any M);
//   quantize_rows_fp8_kernel (scalar, one CTA per row): rows that are not 16-byte aligned.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cuda/linear_fp8_impl.cuh"
#include "cuda/linear_fp8_quantize.h"
#include "cuda/matmul_int4_impl.cuh"

namespace pyquant {

using cuda_detail::LoadF;
using cuda_detail::StoreT;
using namespace fp8_detail;

// x [M, K] T -> xq [M, K] e4m3 bytes, s_x [M] float.
template <typename T>
__global__ void quantize_rows_fp8_kernel(const T* __restrict__ x, uint8_t* __restrict__ xq, float* __restrict__ s_x,
                                         int64_t k, int static_scale, float x_scale) {
  PdlAllowDependents();  // PDL (cuda/pdl.h): the GEMM after this may start loading its weights
  PdlWaitPrimary();
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
        const Fp8RowScale rs = DynamicFp8RowScale(v);
        row_inv = rs.inv;
        row_s = rs.s_x;
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

// Vectorized activation quantizer. x [M, K] T with K * sizeof(T) % 16 == 0 and x 16-byte
// aligned; xq [M, K] e4m3 bytes; s_x [M] float.
//   kGroup threads quantize one row: 32 (a warp; 8 rows per 256-thread CTA) or 512 (the CTA).
//   kNV 16-byte vectors per thread are held in registers: rows of up to kGroup * kNV vectors are
//   read once (all loads issued before the reduction); longer rows are read twice (the second
//   pass mostly from L2).
template <typename T, int kGroup, int kNV>
__global__ void __launch_bounds__(kGroup == 32 ? 256 : kGroup)
    quantize_rows_vec_kernel(const T* __restrict__ x, uint8_t* __restrict__ xq, float* __restrict__ s_x, int m, int k,
                             int static_scale, float x_scale, int late_trigger) {
  constexpr int kE = Vec16<T>::kE;
  constexpr int kRowsPerCta = kGroup == 32 ? 256 / 32 : 1;
  const int lane = threadIdx.x % kGroup;
  const int row = blockIdx.x * kRowsPerCta + threadIdx.x / kGroup;
  const bool row_ok = row < m;
  const int nvec = k / kE;
  const uint4* xr = reinterpret_cast<const uint4*>(x) + int64_t(row_ok ? row : 0) * nvec;
  const bool in_regs = nvec <= kGroup * kNV;
  // PDL (cuda/pdl.h): the GEMM after this may start at once, or (late_trigger) after the stores.
  if (!late_trigger) PdlAllowDependents();
  PdlWaitPrimary();

  uint4 v[kNV];
  float amax = 0.0f;
  if (in_regs) {
#pragma unroll
    for (int i = 0; i < kNV; ++i) {
      const int j = lane + i * kGroup;
      v[i] = (row_ok && j < nvec) ? __ldg(xr + j) : make_uint4(0, 0, 0, 0);
    }
    if (!static_scale) {
#pragma unroll
      for (int i = 0; i < kNV; ++i) amax = VecAbsMax<T>(v[i], amax);  // zero padding: |0| <= amax
    }
  } else if (!static_scale && row_ok) {
#pragma unroll 4
    for (int j = lane; j < nvec; j += kGroup) amax = VecAbsMax<T>(__ldg(xr + j), amax);
  }

  float inv, s;
  if (static_scale) {
    inv = 1.0f / x_scale;
    s = x_scale;
  } else {
    amax = WarpMax(amax);  // max is exact: any reduction order gives the same value
    if constexpr (kGroup > 32) {
      __shared__ float warp_max[kGroup / 32];
      if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
      __syncthreads();
#pragma unroll
      for (int w = 0; w < kGroup / 32; ++w) amax = fmaxf(amax, warp_max[w]);
    }
    const Fp8RowScale rs = DynamicFp8RowScale(amax);
    inv = rs.inv;
    s = rs.s_x;
  }
  if (!row_ok) return;
  uint8_t* qr = xq + int64_t(row) * k;
  if (in_regs) {
#pragma unroll
    for (int i = 0; i < kNV; ++i) {
      const int j = lane + i * kGroup;
      if (j < nvec) QuantStore<T>(v[i], inv, qr + int64_t(j) * kE);
    }
  } else {
#pragma unroll 4
    for (int j = lane; j < nvec; j += kGroup) QuantStore<T>(__ldg(xr + j), inv, qr + int64_t(j) * kE);
  }
  if (lane == 0) s_x[row] = s;
  if (late_trigger) PdlAllowDependents();
}

template <typename T>
void LaunchFp8Quantize(const LinearFp8Problem& p, uint8_t* xq, float* s_x, bool pdl, cudaStream_t stream,
                       bool late_trigger) {
  const int st = p.static_scale ? 1 : 0;
  const bool vec_ok = (p.k * int64_t(sizeof(T))) % 16 == 0 && (reinterpret_cast<uintptr_t>(p.x) & 15) == 0 &&
                      p.m * p.k < (int64_t{1} << 31);
  const T* x = static_cast<const T*>(p.x);
  // Rows longer than a warp holds in registers (K > 4096 for fp16) also take a CTA per row: the
  // warp-per-row kernel reads them twice, and at M = 2048, K = 14336 the second pass missed L2
  // (H100, Nsight Compute: 117 MB read for 59 MB of X, 48.6 us = 20 % of the layer;
  // bench/results/2026-11-24-h100-s13-ncu-fp8-m2048-14336x4096.txt).
  constexpr int kWarpRowVecs = 16;  // 16-byte vectors per lane of the warp-per-row kernel
  const int64_t vecs = p.k * int64_t(sizeof(T)) / 16;
  if (vec_ok && (p.m <= 16 || vecs > 32 * kWarpRowVecs)) {
    // One 512-thread CTA per row, up to 4 vectors per thread in registers (K <= 16384 for fp16).
    (void)LaunchWithPdl(quantize_rows_vec_kernel<T, 512, 4>, dim3(static_cast<unsigned>(p.m)), dim3(512), stream, pdl,
                        x, xq, s_x, static_cast<int>(p.m), static_cast<int>(p.k), st, p.x_scale, late_trigger ? 1 : 0);
  } else if (vec_ok) {
    // A warp per row, up to 16 vectors per lane in registers (K <= 4096 for fp16, 2048 fp32).
    (void)LaunchWithPdl(quantize_rows_vec_kernel<T, 32, kWarpRowVecs>, dim3(static_cast<unsigned>((p.m + 7) / 8)),
                        dim3(256), stream, pdl, x, xq, s_x, static_cast<int>(p.m), static_cast<int>(p.k), st, p.x_scale,
                        late_trigger ? 1 : 0);
  } else {
    (void)LaunchWithPdl(quantize_rows_fp8_kernel<T>, dim3(static_cast<unsigned>(p.m)), dim3(256), stream, pdl, x, xq,
                        s_x, p.k, st, p.x_scale);
  }
}

template void LaunchFp8Quantize<float>(const LinearFp8Problem&, uint8_t*, float*, bool, cudaStream_t, bool);
template void LaunchFp8Quantize<__half>(const LinearFp8Problem&, uint8_t*, float*, bool, cudaStream_t, bool);
template void LaunchFp8Quantize<__nv_bfloat16>(const LinearFp8Problem&, uint8_t*, float*, bool, cudaStream_t, bool);

}  // namespace pyquant
