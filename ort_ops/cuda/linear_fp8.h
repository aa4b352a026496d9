// LinearFp8 CUDA launcher: pointers, sizes, stream -> status. Validation and shapes live in
// ops/linear_fp8.h; the ORT op struct is linear_fp8_op.cc; kernels in linear_fp8_impl.cu(h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/linear_fp8.h"

namespace pyquant {

// Device scratch the launcher may use: set by the op struct from ORT's allocator.
struct Fp8Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};
// Bytes of scratch LaunchLinearFp8Ref needs (quantized X, row scales): the minimum.
size_t LinearFp8WorkspaceBytes(const LinearFp8Problem& p);
// Bytes of scratch LaunchLinearFp8<T> can use: the minimum plus, where the Hopper GEMM serves
// this problem on the current device, its stream-K workspace (with less, the launcher falls back
// to the portable kernel).
template <typename T>
size_t LinearFp8WorkspaceBytesT(const LinearFp8Problem& p, int64_t sm90_min_m);

// Smallest M sent to the Hopper GEMM (below it the small-M mma.sync kernel streams W once).
// CudaFp8Sm90MinM(): PYQUANT_FP8_SM90_MIN_M if set (a huge value keeps the portable kernels, for
// benchmarks and tests; 1 forces the GEMM down to M = 1), else kFp8Sm90MinM. Read by the op
// struct when the kernel is created.
constexpr int64_t kFp8Sm90MinM = 17;
int64_t CudaFp8Sm90MinM();

// p.x, p.w, p.w_scale, p.bias, p.y are device pointers; p.x_scale is a host value.
// LaunchLinearFp8: activation quantization, then on compute capability 9.0 (sm_90a build) the
// CUTLASS FP8 GEMM for M > 16, per-channel scales, fp16 / bf16, K % 16 == 0, N % 8 == 0; else
// the mma.sync kernel when K % 16 == 0 and block_size is 0 or >= 64 (reference kernel otherwise). LaunchLinearFp8Ref: quantization + the
// plain reference GEMM (ground truth; PYQUANT_CUDA_KERNELS=ref selects it for every node).
template <typename T>
cudaError_t LaunchLinearFp8(const LinearFp8Problem& p, Fp8Workspace ws, cudaStream_t stream,
                            int64_t sm90_min_m = kFp8Sm90MinM);
template <typename T>
cudaError_t LaunchLinearFp8Ref(const LinearFp8Problem& p, Fp8Workspace ws, cudaStream_t stream);

}  // namespace pyquant
