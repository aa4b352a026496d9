// LinearFp8 CUDA launcher: pointers, sizes, stream -> status. Validation and shapes live in
// ops/linear_fp8.h; the ORT op struct is linear_fp8_op.cc; kernels in linear_fp8_impl.cu(h).
#pragma once

#include <cuda_runtime.h>

#include "ops/linear_fp8.h"

namespace pyquant {

// Device scratch the launcher may use: set by the op struct from ORT's allocator.
struct Fp8Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};
// Bytes of scratch LaunchLinearFp8 needs for this problem (quantized X, row scales).
size_t LinearFp8WorkspaceBytes(const LinearFp8Problem& p);

// p.x, p.w, p.w_scale, p.bias, p.y are device pointers; p.x_scale is a host value.
// LaunchLinearFp8: activation quantization, then the tensor-core kernel when K % 16 == 0 and
// block_size is 0 or >= 64 (reference kernel otherwise). LaunchLinearFp8Ref: quantization + the
// plain reference GEMM (ground truth; PYQUANT_CUDA_KERNELS=ref selects it for every node).
template <typename T>
cudaError_t LaunchLinearFp8(const LinearFp8Problem& p, Fp8Workspace ws, cudaStream_t stream);
template <typename T>
cudaError_t LaunchLinearFp8Ref(const LinearFp8Problem& p, Fp8Workspace ws, cudaStream_t stream);

}  // namespace pyquant
