// The staged mma kernel of MatMulInt4 (matmul_int4_staged_impl.cu): row-major B and X through a
// cp.async pipeline in shared memory, weights as mma.sync's A operand, K split over sm_90
// clusters. Served as mid variants kInt4StagedVariantFirst.. (matmul_int4_impl.cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/matmul_int4_impl.cuh"
#include "cuda/pdl.h"
#include "cuda/staged_split.h"

namespace pyquant {

// The CTA shape: 8 warps as 4 (columns) x 2 (K) with 16 * 4 * NT rows and 128-wide K stages, or
// "tall" 2 x 4 with half the rows and 256-wide stages; auto picks tall when the 4 x 2 grid, even
// split 8 ways along K, would not cover the SMs.
constexpr int kInt4StagedAuto = 0;
constexpr int kInt4StagedWide = 1;
constexpr int kInt4StagedTall = 2;

struct Int4StagedPlan {
  bool ok = false;    // the kernel covers the problem (block_size >= 64, K a whole number of stages)
  int mt8 = 1;        // 8-token tiles per CTA: 1, 2, 4, 8 by M (grid.y covers the rest)
  bool tall = false;  // the 2 x 4 warp grid
  int ks = 1;         // CTAs per cluster splitting K (sm_90 only)
  int kz = 1;         // groups along grid.z splitting K further (staged_split.h)
  int max_kz = 1;     // the cap on kz when the launch fits the split to one wave
};
// Caps on the plan (LaunchMatMulInt4's choices):
//   max_tokens: 0 = the tokens per CTA follow M (8 / 16 / 32 / 64 for M <= 8 / 16 / 32 / 64); 8, 16 or 32
//     caps them (grid.y then covers M in several rows): 32 at M = 33-64 on the K-split layers
//     (N <= 512) by default, and wherever PYQUANT_INT4_MID_ROWS=32 asks;
//   split: the largest cluster and grid split of K (PYQUANT_STAGED_MAX_CLUSTER / _SPLIT_Z;
//     StagedClusterSplit, StagedGridSplitFor).
struct Int4StagedLimits {
  int max_tokens = 0;
  StagedSplitLimits split;
};
Int4StagedPlan PlanInt4Staged(int shape, const cuda_detail::Int4Geom& g, Int4StagedLimits lim = {});

// x [M, K] T, b [N, K / 2] row-major codes, scales [N, nb] T, zp [N, zp_row_bytes] or nullptr,
// bias [N] T or nullptr, y [M, N] T; T = __half / __nv_bfloat16; 16-byte aligned x and b.
// cudaErrorNotSupported (nothing launched) where PlanInt4Staged says !ok or B rows are padded.
template <typename T>
cudaError_t LaunchInt4Staged(int shape, Int4StagedLimits lim, const T* x, const uint8_t* b, const T* s,
                             const uint8_t* zp, const T* bias, T* y, const cuda_detail::Int4Geom& g, PdlMode pdl,
                             cudaStream_t stream);

// The same kernel on B in the shuffled order (layout/int4_shuffled.h: the op's in-place copy on
// Hopper): b [N * K / 2] shuffled; N % 128 == 0 and K % 64 == 0 (the order's own preconditions),
// 16-byte aligned x; cudaErrorNotSupported (nothing launched) where PlanInt4Staged says !ok.
// Serves M between the shuffled GEMV and the Hopper GEMM (matmul_int4_shuffled_impl.cu).
template <typename T>
cudaError_t LaunchInt4StagedShuffled(int shape, Int4StagedLimits lim, const T* x, const uint8_t* b, const T* s,
                                     const uint8_t* zp, const T* bias, T* y, const cuda_detail::Int4Geom& g,
                                     PdlMode pdl, cudaStream_t stream);

}  // namespace pyquant
