// The staged mma kernel of LinearFp8 (linear_fp8_staged_impl.cu): quantized X and the e4m3 weights
// through a cp.async pipeline in shared memory, the weights as mma.sync's A operand, K split over
// sm_90 clusters; the FP8 analogue of matmul_int4_staged.h. The default on sm_90's narrow layers at
// M = 3-256 (Fp8StagedByDefault, linear_fp8_impl.cu; grid rows of 64 tokens above 64); PYQUANT_FP8_GEMV=staged
// pins it below the Hopper GEMM.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/pdl.h"
#include "cuda/staged_split.h"

namespace pyquant {

// The problem after activation quantization (stage 1 of linear_fp8_impl.cu).
//   xq [m, k] e4m3 bytes, s_x [m] float, w [n, k] e4m3 bytes, w_scale [n] float (block_size 0) or
//   [n, n_scale_blocks] float (block_size a power of two >= 64), bias [n] T or nullptr, y [m, n] T.
struct Fp8StagedProblem {
  const uint8_t* xq = nullptr;
  const float* s_x = nullptr;
  const uint8_t* w = nullptr;
  const float* w_scale = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  int m = 0, n = 0, k = 0;
  int block_size = 0;
  int n_scale_blocks = 1;
  // The largest cluster and grid split of K (Fp8Options::staged_split; staged_split.h).
  StagedSplitLimits split;
  // CTA shape: kInt4StagedAuto / Wide / Tall (matmul_int4_staged.h; the INT4 kernel's same three
  // choices), from Fp8Options::staged_shape.
  int shape = 0;
};

// T = __half / __nv_bfloat16 (the output type). cudaErrorNotSupported, nothing launched, where the
// kernel does not apply: K not a whole number of its 128- or 256-wide stages, block_size
// neither 0 nor a power of two >= 64, xq / w not 16-byte aligned.
// Whether LaunchFp8Staged takes this shape (the alignment aside): the dispatch asks before it
// turns the Hopper GEMM down for it.
bool Fp8StagedFits(const Fp8StagedProblem& p);

template <typename T>
cudaError_t LaunchFp8Staged(const Fp8StagedProblem& p, PdlMode pdl, cudaStream_t stream);

}  // namespace pyquant
