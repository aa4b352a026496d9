// LinearFp8 with weight_only = 1 on CUDA (linear_fp8_weight_only_impl.cu): X stays in T (no
// activation quantization, no workspace), W is e4m3 converted to T in registers (exact).
// The launcher: pointers, sizes, stream -> status; the op struct (linear_fp8_op.cc) validates.
#pragma once

#include <cuda_runtime.h>

#include "cuda/pdl.h"
#include "ops/linear_fp8.h"

namespace pyquant {

// Where the tensor-core kernel serves a weight-only problem (else the reference kernel): T =
// __half / __nv_bfloat16, K % 16 == 0 (16-byte rows of W, 32-byte pieces of X), block_size 0 or
// >= 64 (a 64-wide K chunk lies in one scale block), 16-byte aligned X and W, sizes that fit the
// kernels' 32-bit offsets.
bool Fp8WeightOnlyFastPath(const LinearFp8Problem& p, size_t elem_bytes);

// Device scratch LaunchFp8WeightOnly can use: the Hopper GEMM's stream-K workspace where that GEMM
// serves p on the current device (from M = gemm_min_m, per-channel scales), else 0.
template <typename T>
size_t Fp8WeightOnlyWorkspaceBytes(const LinearFp8Problem& p, int64_t gemm_min_m);

// p.x, p.w, p.w_scale, p.bias, p.y device pointers; p.weight_only set (p.x_scale unused).
// M <= kFp8GemvAutoMaxM: the fused GEMV without its quantization (linear_fp8_gemv.h); on sm_90
// from M = gemm_min_m with per-channel scales: the mixed-input Hopper GEMM (sm90/fp8_wo_gemm_sm90.h)
// when ws holds its workspace; else fp8_wo_mma_kernel; force_ref (or outside
// Fp8WeightOnlyFastPath): the reference kernel.
template <typename T>
cudaError_t LaunchFp8WeightOnly(const LinearFp8Problem& p, void* ws, size_t ws_bytes, int64_t gemm_min_m,
                                bool force_ref, PdlMode pdl, cudaStream_t stream);

}  // namespace pyquant
