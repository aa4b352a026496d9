// How the Hopper GEMMs (fp8_gemm_sm90.h, int4_gemm_sm90.h) are launched, beyond their operands.
// Plain header (no CUTLASS types): the portable launchers fill it in.
#pragma once

#include <cuda_runtime.h>

namespace pyquant {
namespace sm90 {

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
