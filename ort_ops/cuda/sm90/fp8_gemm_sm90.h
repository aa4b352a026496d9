// Hopper (sm_90a) LinearFp8 GEMM for prefill-sized M: a CUTLASS 3.x FP8 wgmma kernel
// (e4m3 x e4m3, fp32 accumulation with CUTLASS's periodic promotion into fp32 registers, fp16 /
// bf16 output) whose epilogue applies both scales and the bias:
//   Y[m, n] = s_x[m] * (s_w[n] * acc[m, n]) + bias[n]
// Plain header: no CUTLASS types, so the portable launcher (linear_fp8_impl.cu, all archs) can
// call it; the definitions live in fp8_gemm_sm90.cu, compiled for sm_90a only and present when
// PYQUANT_WITH_SM90 is defined.
//
// Covers per-channel weight scales only (block_size 0). Per-K-block scales keep the portable
// mma.sync kernel: CUTLASS 4.2's blockwise FP8 mainloop would need the scales re-laid out
// (MN-major [n_blocks, N] and [n_blocks, M] per-token scales written by the quantizer) and a K
// tile equal to the block; that is left for later (see the report of issue #5).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/sm90/launch_control.h"

namespace pyquant {
namespace sm90 {

// Benchmark knobs (environment variables read by the op at kernel creation, see
// linear_fp8_op.cc); all-zero is the default configuration.
struct Fp8GemmTuning : Sm90SchedulerTuning {
  // 0: default tiles (promoting mainloop; 64x64x128 ping-pong for M <= 64, 64x128x128 ping-pong
  //    for M <= 256 on few channel tiles, 128x128x128 cooperative otherwise: fp8_gemm_sm90.cu).
  // fp16 output only, else the default (fp8_gemm_sm90_variants.cu):
  //   1: 128x128x128 FastAccum   2: 128x256x128 FastAccum   3: 128x128x128, 2x1 cluster
  //   4: 128x256x128 FastAccum, 2x1 cluster   5: 64x128x128 ping-pong   6: 5 with a 2x1 cluster
  //   7: 64x64x128 ping-pong (5..7: promoting, persistent data-parallel scheduler)
  //   8: 128x64x128 cooperative (the M <= 64 default before the ping-pong tiles)
  //   9..11: 128x192 / 128x192 2x1 cluster / 128x128 cooperative, promoting
  //   12..15: the overlapped-promotion mainloop (fp8_overlapped_promotion.cuh): 128x128,
  //   128x256 in 4 parts, 128x256 in 4 parts with a 2x1 cluster, 64x128 ping-pong
  //   16: 13 with the two warpgroups' pipeline drains staggered by one k-block
  int variant = 0;
  int promote = 0;  // mma_promotion_interval (MMAs of k = 32; multiple of 4); 0: CUTLASS's 4
};

struct Fp8GemmArgs {
  const uint8_t* xq = nullptr;     // [M, K] e4m3 (quantized X, row-major), 16-byte aligned
  const float* s_x = nullptr;      // [M] float, per-token (or repeated static) activation scale
  const uint8_t* w = nullptr;      // [N, K] e4m3 (row-major), 16-byte aligned
  const float* w_scale = nullptr;  // [N] float, per output channel
  const void* bias = nullptr;      // [N] T or nullptr
  void* y = nullptr;               // [M, N] T (row-major), 16-byte aligned
  int m = 0, n = 0, k = 0;
  int device = 0;  // CUDA device ordinal of the pointers
  // The 128 x 64 cooperative tile at any M, whose stream-K scheduler can split K (tune.decomposition
  // = 2): the launcher's choice for long-K narrow layers at 64 < M <= 256 (linear_fp8_impl.cu).
  bool narrow_tile = false;
  Fp8GemmTuning tune;
  Sm90LaunchControl launch;
};

// Shapes and alignments the kernel covers (the caller falls back to the portable kernels
// otherwise): K % 16 == 0, N % 8 == 0, 16-byte aligned xq / w / y, and CUTLASS's can_implement.
bool Fp8GemmSupported(const Fp8GemmArgs& a, bool bf16);
// Device scratch bytes LaunchFp8Gemm needs (stream-K partial tiles); may be 0.
size_t Fp8GemmWorkspaceBytes(const Fp8GemmArgs& a, bool bf16);
// Runs the GEMM on `stream` (a.launch: PDL, and the quantizer launched right before it). bf16
// selects __nv_bfloat16 (else __half) for T.
// cudaErrorNotSupported: not covered; cudaErrorInvalidValue: workspace too small.
cudaError_t LaunchFp8Gemm(const Fp8GemmArgs& a, bool bf16, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream);

}  // namespace sm90
}  // namespace pyquant
