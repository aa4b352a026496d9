// Hopper (sm_90a) GEMM of weight-only LinearFp8 (weight_only = 1) for prefill-sized M: a CUTLASS 3.x
// mixed-input wgmma kernel, e4m3 weights converted to T in registers (exact), T activations through
// TMA, fp32 accumulators; the epilogue applies the per-channel weight scale and the bias:
//   Y[m, n] = s_w[n] * acc[m, n] + bias[n], rounded once to T.
// Plain header: no CUTLASS types, so the portable launcher (linear_fp8_weight_only_impl.cu, all
// archs) can call it; the definitions live in fp8_wo_gemm_sm90.cu, compiled for sm_90a only and
// present when PYQUANT_WITH_SM90 is defined. Per-channel scales only (block_size 0): per-K-block
// scales keep the mma.sync kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/sm90/launch_control.h"

namespace pyquant {
namespace sm90 {

struct Fp8WoGemmArgs {
  const void* x = nullptr;         // [M, K] T, row-major, 16-byte aligned
  const uint8_t* w = nullptr;      // [N, K] e4m3, 16-byte aligned
  const float* w_scale = nullptr;  // [N]
  const void* bias = nullptr;      // [N] T or nullptr
  void* y = nullptr;               // [M, N] T
  int m = 0, n = 0, k = 0;
  int device = 0;            // CUDA device ordinal of the pointers
  Sm90LaunchControl launch;  // PDL after the previous kernel (no pre_launch)
};

// K % 16 == 0, N % 8 == 0, 16-byte aligned pointers, and CUTLASS's can_implement.
bool Fp8WoGemmSupported(const Fp8WoGemmArgs& a, bool bf16);
// Device scratch bytes LaunchFp8WoGemm needs (stream-K partial tiles); may be 0.
size_t Fp8WoGemmWorkspaceBytes(const Fp8WoGemmArgs& a, bool bf16);
// bf16 selects __nv_bfloat16 (else __half) for T. cudaErrorNotSupported: not covered.
cudaError_t LaunchFp8WoGemm(const Fp8WoGemmArgs& a, bool bf16, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream);

}  // namespace sm90
}  // namespace pyquant
