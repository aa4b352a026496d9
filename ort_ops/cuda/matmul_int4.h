// MatMulInt4 CUDA launcher: pointers, sizes, stream -> status. Validation and shapes live in
// ops/matmul_int4.h; the ORT op struct is matmul_int4_op.cc; kernels in matmul_int4_impl.cu(h).
#pragma once

#include <cuda_runtime.h>

#include "ops/matmul_int4.h"

namespace pyquant {

// p.x, p.b, p.scales, p.zero_points, p.bias, p.y are device pointers (ORT's CUDA allocations).
// T is float, __half or __nv_bfloat16 (matching p.x / p.scales / p.bias / p.y).
template <typename T>
cudaError_t LaunchMatMulInt4(const MatMulInt4Problem& p, cudaStream_t stream);

}  // namespace pyquant
