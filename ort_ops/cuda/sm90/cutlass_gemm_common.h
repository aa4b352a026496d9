// What the INT4 and FP8 Hopper GEMM templates (int4_gemm_sm90_kernel.cuh,
// fp8_gemm_sm90_kernel.cuh) share, sm_90a only:
//
// ScheduleTraits: the CUTLASS 3.x pieces that follow from a kernel schedule.
//   cooperative (KernelTmaWarpSpecializedCooperative and its FP8FastAccum form): 2 consumer
//     warpgroups share one 128-row tile -> cooperative TMA epilogue, stream-K tile scheduler
//     (splits the K loop of the last wave over idle SMs)
//   ping-pong (KernelTmaWarpSpecializedPingpong): each consumer warpgroup owns a 64-row tile and
//     the two take turns on the tensor cores -> plain TMA epilogue, persistent data-parallel
//     scheduler (CUTLASS's ping-pong kernel has no stream-K)
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#ifndef CUTLASS_ENABLE_GDC_FOR_SM90
// Without it the kernels skip griddepcontrol.wait, and a PDL launch (launch_control.h) would let
// them read their inputs before the previous kernel has written them.
#error "the sm90 sources need CUTLASS_ENABLE_GDC_FOR_SM90 (CMakeLists.txt)"
#endif

#include "cuda/device_info.h"
#include "cuda/sm90/launch_control.h"
#include "cute/layout.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/kernel_hardware_info.h"

namespace pyquant {
namespace sm90 {
namespace detail {

using Pingpong = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
// The cooperative schedule; for FP8 it selects CUTLASS's promoting (accurate) mainloop.
using Cooperative = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using NoCluster = cute::Shape<cute::_1, cute::_1, cute::_1>;

// The stream-K tile scheduler for the cooperative kernels. CUTLASS 4.2's Sm90 stream-K scheduler
// does not compile with CUTLASS_ENABLE_GDC_FOR_SM90: the cooperative kernel then calls its const
// is_last_tile(), which binds a member to a non-const reference. This tag selects the same
// scheduler with is_last_tile() == false: the kernel never hints an early launch of the next
// kernel (which then starts when this grid completes, as without PDL), while its own PDL overlap
// with the kernel before it (prologue during that kernel's tail) is unaffected.
struct StreamKSchedulerGdc {};
template <class TileShape, class ClusterShape>
class StreamKSchedulerNoEarlyRelease
    : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<TileShape, ClusterShape> {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<TileShape, ClusterShape>;

 public:
  using Base::Base;
  CUTLASS_DEVICE bool is_last_tile(typename Base::WorkTileInfo, uint32_t = 1) const { return false; }
};

template <typename Schedule>
struct ScheduleTraits {
  static constexpr bool kPingpong = std::is_same<Schedule, Pingpong>::value;
  using EpilogueSchedule = std::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized,
                                              cutlass::epilogue::TmaWarpSpecializedCooperative>;
  using TileScheduler = std::conditional_t<kPingpong, cutlass::gemm::PersistentScheduler, StreamKSchedulerGdc>;
};

// Applies Sm90SchedulerTuning to the scheduler arguments of a kernel with schedule traits T.
// Stream-K scheduler (cooperative): decomposition, splits and reduction order (deterministic,
// ordered "turnstile" reduction of partial tiles unless t.nondeterministic: the same inputs give
// bit-identical outputs); both schedulers: raster order and swizzle.
template <typename Traits, typename SchedulerArgs>
void ApplySchedulerTuning(SchedulerArgs& s, const Sm90SchedulerTuning& t) {
  using namespace cutlass::gemm::kernel::detail;
  if constexpr (!Traits::kPingpong) {
    s.reduction_mode = t.nondeterministic ? ReductionMode::Nondeterministic : ReductionMode::Deterministic;
    s.decomposition_mode = t.decomposition == 1   ? DecompositionMode::StreamK
                           : t.decomposition == 2 ? DecompositionMode::SplitK
                           : t.decomposition == 3 ? DecompositionMode::DataParallel
                                                  : DecompositionMode::Heuristic;
    if (t.splits > 1) s.splits = t.splits;
  }
  s.raster_order = t.raster == 1   ? RasterOrderOptions::AlongM
                   : t.raster == 2 ? RasterOrderOptions::AlongN
                                   : RasterOrderOptions::Heuristic;
  if (t.swizzle > 1) s.max_swizzle_size = t.swizzle;
}

// Data-parallel tiles instead of stream-K for the mixed-input GEMMs (INT4, weight-only FP8), where the
// K loop is short and the output tiles fit one wave: stream-K can then only split a few K tiles per
// output tile over the idle SMs, and its partial-tile fixup (workspace barriers cleared by a memset,
// ordered reduction) costs more than the split saves. H100, session 31
// (bench/results/2026-11-27-h100-s31-small-split-bench-cuda.md, INT4, stream-K against data-parallel,
// us): 576 x 576 at M = 64 / 128 / 1024: 9.4 / 10.5 / 13.6 against 6.9 / 8.0 / 10.7; 1536 x 576 (24 K
// tiles): 15.5 / 22.1 against 14.7 / 20.0 at M = 256 / 1024; on 4096 x 4096 (64 K tiles) data-parallel
// loses (M = 64: 28.6 vs 20.7). channels / tokens / k: the problem in the swapped mapping (M_c, N_c, K).
constexpr int kDataParallelMaxKTiles = 24;
template <typename TileShape>
bool DataParallelPays(int64_t channels, int64_t tokens, int64_t k, int sm_count) {
  constexpr int kTileNc = cute::size<0>(TileShape{}), kTileMc = cute::size<1>(TileShape{});
  constexpr int kTileK = cute::size<2>(TileShape{});
  const int64_t tiles = ((channels + kTileNc - 1) / kTileNc) * ((tokens + kTileMc - 1) / kTileMc);
  return (k + kTileK - 1) / kTileK <= kDataParallelMaxKTiles && tiles <= sm_count;
}

// The arguments both FP8 GEMMs (W8A8, fp8_gemm_sm90_kernel.cuh; weight-only, fp8_wo_gemm_sm90.cu)
// start from, in their swapped mapping (M_c, N_c, K) = (n channels, m tokens, k), L = 1:
//   A_c = W [n, k] K-major (ElementA: e4m3), B_c = X [m, k] K-major (ElementB: e4m3 or T),
//   D_c = Y^T [n, m] column-major = Y [m, n] row-major (ElementD = T).
// The caller fills the epilogue's fusion tree (args.epilogue.thread) and the scheduler.
template <typename Gemm, typename ElementA, typename ElementB, typename ElementD>
typename Gemm::Arguments SwappedGemmArguments(const void* w, const void* x, void* y, int m, int n, int k, int device) {
  using Kernel = typename Gemm::GemmKernel;
  // A: (n, k, l) -> n * K + k.  B: (m, k, l) -> m * K + k.  D: (n, m, l) -> m * N + n.
  const typename Kernel::StrideA stride_a = cute::make_stride(int64_t(k), cute::_1{}, int64_t(0));
  const typename Kernel::StrideB stride_b = cute::make_stride(int64_t(k), cute::_1{}, int64_t(0));
  const typename Kernel::StrideD stride_d = cute::make_stride(cute::_1{}, int64_t(n), int64_t(0));
  cutlass::KernelHardwareInfo hw;
  hw.device_id = device;
  hw.sm_count = CudaSmCount(device);
  return
      typename Gemm::Arguments{cutlass::gemm::GemmUniversalMode::kGemm,
                               {n, m, k, 1},
                               {static_cast<const ElementA*>(w), stride_a, static_cast<const ElementB*>(x), stride_b},
                               {{}, nullptr, stride_d, static_cast<ElementD*>(y), stride_d},
                               hw};
}

// GemmRunner: the calls around a GemmUniversalAdapter, for a struct D that defines `Gemm` (the
// adapter) and `static typename Gemm::Arguments MakeArguments(const Args&)`; D derives from
// GemmRunner<D, Args>.
//   WorkspaceBytes: device scratch the launch needs (stream-K partial tiles; 0 for ping-pong)
//   CanImplement:   CUTLASS's own check (TMA alignment of every operand's extents, tile vs
//                   scale groups), on top of the callers' pointer checks
//   Run:            cudaErrorInvalidValue when ws_bytes is too small, cudaErrorNotSupported when
//                   CUTLASS cannot implement the problem. initialize() only fills the params
//                   struct and, for stream-K / split-K, clears the workspace's barrier area with a
//                   memset on `stream` (no allocation, no sync: capturable in a CUDA graph); then
//                   a.launch.pre_launch (if any) and the kernel, with PDL when a.launch.pdl
//                   (launch_control.h).
template <typename D, typename Args>
struct GemmRunner {
  static size_t WorkspaceBytes(const Args& a) { return D::Gemm::get_workspace_size(D::MakeArguments(a)); }

  static bool CanImplement(const Args& a) {
    return D::Gemm::can_implement(D::MakeArguments(a)) == cutlass::Status::kSuccess;
  }

  static cudaError_t Run(const Args& a, void* ws, size_t ws_bytes, cudaStream_t stream) {
    using Gemm = typename D::Gemm;
    typename Gemm::Arguments args = D::MakeArguments(a);
    if (Gemm::get_workspace_size(args) > ws_bytes) return cudaErrorInvalidValue;
    Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return cudaErrorNotSupported;
    if (gemm.initialize(args, ws, stream) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
    if (a.launch.pre_launch != nullptr) {
      const cudaError_t e = a.launch.pre_launch(a.launch.pre_launch_ctx, stream);
      if (e != cudaSuccess) return e;
    }
    if (gemm.run(stream, nullptr, a.launch.pdl) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
    return cudaGetLastError();
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace pyquant

namespace cutlass::gemm::kernel::detail {
template <class ArchTag, class TileShape, class ClusterShape, uint32_t SchedulerPipelineStageCount>
struct TileSchedulerSelector<pyquant::sm90::detail::StreamKSchedulerGdc, ArchTag, TileShape, ClusterShape,
                             SchedulerPipelineStageCount> {
  using Scheduler = pyquant::sm90::detail::StreamKSchedulerNoEarlyRelease<TileShape, ClusterShape>;
};
}  // namespace cutlass::gemm::kernel::detail
