// MatMulInt4 CUDA launcher: pointers, sizes, stream -> status. Validation and shapes live in
// ops/matmul_int4.h; the ORT op struct is matmul_int4_op.cc; kernels in matmul_int4_impl.cu(h).
#pragma once

#include <cuda_runtime.h>

#include "ops/matmul_int4.h"

namespace pyquant {

// p.x, p.b, p.scales, p.zero_points, p.bias, p.y are device pointers (ORT's CUDA allocations).
// T is float, __half or __nv_bfloat16 (matching p.x / p.scales / p.bias / p.y).
//
// LaunchMatMulInt4 picks the fastest kernel that covers the problem (tensor-core kernels for
// fp16/bf16, block_size >= 32, K % 8 == 0, 16-byte aligned X and B; the reference kernel
// otherwise). LaunchMatMulInt4Ref always runs the plain reference kernel (the ground truth of
// the device tests; selected for every node when PYQUANT_CUDA_KERNELS=ref is set).
//
// tiled_min_m: from this M on, the tiled (shared-memory) kernel instead of the small-M kernel
// (default kInt4TiledMinM; PYQUANT_INT4_TILED_MIN_M overrides it per kernel creation, for
// benchmarks).
//
// ws: device scratch for the split-K sums of the tiled kernel (MatMulInt4WorkspaceBytes bytes;
// M * N floats when a split is used, else 0). With less, the kernel runs without split-K.
constexpr int64_t kInt4TiledMinM = 65;
struct Int4Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};
template <typename T>
size_t MatMulInt4WorkspaceBytes(const MatMulInt4Problem& p, int64_t tiled_min_m = kInt4TiledMinM);
template <typename T>
cudaError_t LaunchMatMulInt4(const MatMulInt4Problem& p, cudaStream_t stream, int64_t tiled_min_m = kInt4TiledMinM,
                             Int4Workspace ws = {});
template <typename T>
cudaError_t LaunchMatMulInt4Ref(const MatMulInt4Problem& p, cudaStream_t stream);

// True when PYQUANT_CUDA_KERNELS=ref is set in the environment (read once per kernel creation).
bool CudaForceReferenceKernels();
// PYQUANT_INT4_TILED_MIN_M if set, else kInt4TiledMinM.
int64_t CudaInt4TiledMinM();

}  // namespace pyquant
