// The CUTLASS 3.x mixed-input GEMM template behind MatMulInt4's Hopper path (problem mapping,
// tiles and epilogue: int4_gemm_sm90.cu), shared by the default configurations
// (int4_gemm_sm90.cu) and the benchmark variants (int4_gemm_sm90_variants.cu). sm_90a only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/device_info.h"
#include "cuda/sm90/cutlass_gemm_common.h"
#include "cuda/sm90/int4_gemm_sm90.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/kernel_hardware_info.h"

namespace pyquant {
namespace sm90 {
namespace detail {

using namespace cute;

// Schedule: cooperative (default) or ping-pong; what follows from it: cutlass_gemm_common.h. In the
// ping-pong kernel one warpgroup decodes int4 while the other's wgmmas run.
template <typename Element, typename TileShape, typename ClusterShape_ = cute::Shape<cute::_1, cute::_1, cute::_1>,
          typename Schedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative>
struct Int4Gemm : GemmRunner<Int4Gemm<Element, TileShape, ClusterShape_, Schedule>, Int4GemmArgs> {
  using ElementQ = cutlass::uint4b_t;  // codes 0..15; the zero point comes in through zeros_t
  using ElementAcc = float;
  using LayoutA = cutlass::layout::RowMajor;     // W [N, K], K-major
  using LayoutB = cutlass::layout::ColumnMajor;  // X^T [K, M], K-major
  using LayoutD = cutlass::layout::ColumnMajor;  // Y^T [N, M]
  static constexpr int kAlignA = 128 / cutlass::sizeof_bits<ElementQ>::value;  // 32 codes = 16 bytes
  static constexpr int kAlignB = 128 / cutlass::sizeof_bits<Element>::value;   // 8 elements
  static constexpr int kAlignD = kAlignB;
  using ClusterShape = ClusterShape_;
  static constexpr bool kPingpong = ScheduleTraits<Schedule>::kPingpong;
  using EpilogueSchedule = typename ScheduleTraits<Schedule>::EpilogueSchedule;
  using TileScheduler = typename ScheduleTraits<Schedule>::TileScheduler;

  // D = 1 * acc + bias[row], C absent (void: no smem, no load).
  using Fusion = cutlass::epilogue::fusion::LinCombPerRowBias<Element, float, Element, Element, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, float, void, LayoutD, kAlignD, Element, LayoutD,
      kAlignD, EpilogueSchedule, Fusion>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cute::tuple<ElementQ, Element, Element>, LayoutA, kAlignA,
      Element, LayoutB, kAlignB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      Schedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments MakeArguments(const Int4GemmArgs& a) {
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideD = typename Kernel::StrideD;
    using StrideS = typename Mainloop::StrideScale;
    // A: (n, k, l) -> n * row_bytes * 2 + k codes.  B: (m, k, l) -> m * K + k.  D: (n, m, l) -> m * N + n.
    StrideA stride_a = cute::make_stride(int64_t(a.row_bytes) * 2, _1{}, int64_t(0));
    StrideB stride_b = cute::make_stride(int64_t(a.k), _1{}, int64_t(0));
    StrideD stride_d = cute::make_stride(_1{}, int64_t(a.n), int64_t(0));
    StrideS stride_s = cute::make_stride(_1{}, int64_t(a.n), int64_t(0));  // (n, g, l) -> g * N + n

    cutlass::KernelHardwareInfo hw;
    hw.device_id = a.device;
    hw.sm_count = CudaSmCount(a.device);

    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {a.n, a.m, a.k, 1},
        {reinterpret_cast<const ElementQ*>(a.b), stride_a, static_cast<const Element*>(a.x), stride_b,
         static_cast<const Element*>(a.scales_t), stride_s, a.block_size, static_cast<const Element*>(a.zeros_t)},
        {{}, nullptr, stride_d, static_cast<Element*>(a.y), stride_d},
        hw};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.thread.bias_ptr = static_cast<const Element*>(a.bias);
    // Scheduler (stream-K heuristic, deterministic reduction: the same inputs give bit-identical
    // outputs run to run, unless a.sched asks otherwise): ApplySchedulerTuning.
    ApplySchedulerTuning<ScheduleTraits<Schedule>>(args.scheduler, a.sched);
    return args;
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace pyquant
