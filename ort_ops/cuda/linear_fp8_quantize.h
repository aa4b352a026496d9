// Stage 1 of LinearFp8, activation quantization (linear_fp8_quantize_impl.cu): X [M, K] T ->
// xq [M, K] e4m3 bytes and s_x [M] float (dynamic per-token scales, or the static x_scale), the
// numerics of docs/ops.md. Every CUDA path of the op runs it first (linear_fp8_impl.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/linear_fp8.h"

namespace pyquant {

// T = float / __half / __nv_bfloat16 (X's type). pdl: PDL-launched (cuda/pdl.h). late_trigger: the
// vectorized kernels let the PDL-launched GEMM after them start only after their stores
// (Fp8Options::gemm_pdl_late); else at once. Launch errors are left for cudaGetLastError.
template <typename T>
void LaunchFp8Quantize(const LinearFp8Problem& p, uint8_t* xq, float* s_x, bool pdl, cudaStream_t stream,
                       bool late_trigger = false);

}  // namespace pyquant
