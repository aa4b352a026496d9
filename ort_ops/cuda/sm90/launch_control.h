// How the Hopper GEMMs (fp8_gemm_sm90.h, int4_gemm_sm90.h) are launched and scheduled, beyond
// their operands. Plain header (no CUTLASS types): the portable launchers fill it in.
#pragma once

#include <cuda_runtime.h>

namespace pyquant {
namespace sm90 {

// Tile-scheduler knobs of the cooperative (stream-K scheduler) kernels, applied by
// ApplySchedulerTuning (cutlass_gemm_common.h); all-zero = CUTLASS's heuristic with the
// deterministic reduction. The ping-pong kernels (persistent data-parallel scheduler) take only
// raster and swizzle.
struct Sm90SchedulerTuning {
  int decomposition = 0;     // 0 heuristic (stream-K where it pays), 1 stream-K, 2 split-K, 3 data-parallel
  int splits = 0;            // split-K factor (decomposition 2 / heuristic); 0: the scheduler's choice
  int raster = 0;            // 0 heuristic, 1 along M_c (channels), 2 along N_c (tokens)
  int swizzle = 0;           // max_swizzle_size (1, 2, 4, 8); 0: 1
  int nondeterministic = 0;  // 1: unordered stream-K / split-K reduction (not bit-reproducible)
};

struct Sm90LaunchControl {
  // Programmatic dependent launch (cuda/pdl.h): the GEMM may start while the previous kernel on
  // the stream drains; its prologue (barrier init, TMA descriptor prefetch) overlaps that tail
  // and every load of a tensor waits in griddepcontrol.wait (CUTLASS_ENABLE_GDC_FOR_SM90, set for
  // the sm90 sources in CMakeLists.txt). Its own last tiles let the next kernel launch early.
  bool pdl = false;
  // Called after the GEMM's initialize() (which clears a stream-K workspace with a memset on the
  // stream) and right before its launch: LinearFp8 launches its activation quantizer here, so that
  // the GEMM directly follows the kernel producing its input (a memset node between them would
  // break the PDL overlap). nullptr: nothing.
  cudaError_t (*pre_launch)(void* ctx, cudaStream_t stream) = nullptr;
  void* pre_launch_ctx = nullptr;
};

}  // namespace sm90
}  // namespace pyquant
