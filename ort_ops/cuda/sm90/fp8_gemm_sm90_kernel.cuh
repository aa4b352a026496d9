// The CUTLASS 3.x FP8 GEMM template behind fp8_gemm_sm90.h, shared by the translation units
// that instantiate it (fp8_gemm_sm90.cu: the default tiles for fp16 / bf16;
// fp8_gemm_sm90_variants.cu: the benchmark-selectable variants), so that they compile in
// parallel. sm_90a only; see fp8_gemm_sm90.cu for the problem mapping (swap-AB) and the epilogue.
//
// Parameters:
//   Element      T of Y and bias (cutlass::half_t / cutlass::bfloat16_t)
//   TileShape    (channels M_c) x (tokens N_c) x K per CTA tile
//   ClusterShape CTAs per cluster; 2 x 1 multicasts each Xq (B) tile to the two CTAs that work on
//                the same tokens and neighbouring channel tiles (one L2 read, two SMs)
//   Schedule     KernelTmaWarpSpecializedCooperative: the FP8 mainloop that promotes the wgmma
//                accumulators into fp32 registers every mma_promotion_interval MMAs (k = 32 each);
//                KernelTmaWarpSpecializedCooperativeFP8FastAccum: no promotion (the whole K in the
//                tensor core's reduced-precision accumulator; fewer registers, so 128 x 256 fits)
//                KernelTmaWarpSpecializedPingpong: the promoting mainloop with 64-row tiles, one per
//                consumer warpgroup, the two taking turns on the tensor cores (one promotes /
//                runs its epilogue while the other's wgmmas run); persistent data-parallel
//                scheduler, since CUTLASS's ping-pong kernel has no stream-K
//   kOverlapParts 0: CUTLASS's promoting mainloop as built; 1, 2, 4: the same schedule with the
//                mainloop of fp8_overlapped_promotion.cuh (promotion adds under the next wgmmas,
//                the warpgroup tile split into that many N-parts; promoting schedules only)
//   kOverlapStagger the overlapped mainloop's second warpgroup drains one k-block later
#pragma once

#include <mutex>
#include <type_traits>

#include "cuda/device_info.h"
#include "cuda/sm90/cutlass_gemm_common.h"
#include "cuda/sm90/fp8_gemm_sm90.h"
#include "cuda/sm90/fp8_overlapped_promotion.cuh"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
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

template <typename Element, typename TileShape, typename ClusterShape = Shape<_1, _1, _1>,
          typename Schedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative, int kOverlapParts = 0,
          bool kOverlapStagger = false>
struct Fp8Gemm
    : GemmRunner<Fp8Gemm<Element, TileShape, ClusterShape, Schedule, kOverlapParts, kOverlapStagger>, Fp8GemmArgs> {
  using ElementQ = cutlass::float_e4m3_t;
  using ElementAcc = float;
  using LayoutA = cutlass::layout::RowMajor;     // W [N, K]
  using LayoutB = cutlass::layout::ColumnMajor;  // Xq^T [K, M]
  using LayoutD = cutlass::layout::ColumnMajor;  // Y^T [N, M]
  static constexpr int kAlignQ = 16;             // 16 e4m3 = 16 bytes (TMA)
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<Element>::value;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
  // The promoting mainloop has a runtime mma_promotion_interval; FastAccum has none.
  static constexpr bool kPingpong = ScheduleTraits<Schedule>::kPingpong;
  static constexpr bool kPromoting =
      kPingpong || std::is_same<Schedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative>::value;
  using EpilogueSchedule = typename ScheduleTraits<Schedule>::EpilogueSchedule;
  using TileScheduler = typename ScheduleTraits<Schedule>::TileScheduler;

  // Epilogue visitor tree, leaves first:
  using WScale = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float, float>;  // s_w[n]
  using Bias = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, Element, float>;  // bias[n]
  using XScale = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float, float>;  // s_x[m]
  using Acc = cutlass::epilogue::fusion::Sm90AccFetch;
  // s_w[n] * acc
  using ScaledAcc = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>, WScale, Acc>;
  // s_x[m] * (s_w[n] * acc) + bias[n], fp32, rounded once to Element
  using Tree = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, Element, float, kRound>, XScale,
      ScaledAcc, Bias>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, float, void, LayoutD, kAlignD, Element, LayoutD,
      kAlignD, EpilogueSchedule, Tree>::CollectiveOp;

  using BuiltMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementQ, LayoutA, kAlignQ, ElementQ, LayoutB, kAlignQ,
      ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      Schedule>::CollectiveOp;
  static_assert(kOverlapParts == 0 || kPromoting, "the overlapped mainloop replaces a promoting one");
  using Mainloop = std::conditional_t<kOverlapParts == 0, BuiltMainloop,
                                      Fp8OverlappedPromotionMainloop<BuiltMainloop, kOverlapParts, kOverlapStagger>>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments MakeArguments(const Fp8GemmArgs& a) {
    typename Gemm::Arguments args =
        SwappedGemmArguments<Gemm, ElementQ, ElementQ, Element>(a.w, a.xq, a.y, a.m, a.n, a.k, a.device);
    if constexpr (kPromoting) {
      // MMAs (k = 32 each) accumulated inside the tensor core between two promotions into the
      // fp32 registers; CUTLASS's default 4 = one 128-wide k-block.
      if (a.tune.promote > 0) args.mainloop.mma_promotion_interval = static_cast<uint32_t>(a.tune.promote);
    }
    // Tree arguments: {XScale, ScaledAcc {WScale, Acc, op}, Bias, op}.
    args.epilogue.thread = {
        {a.s_x, 0.0f, {}}, {{a.w_scale, 0.0f, {}}, {}, {}}, {static_cast<const Element*>(a.bias), Element(0), {}}, {}};
    // Scheduler: deterministic reduction by default; the rest are benchmark knobs (Fp8GemmTuning).
    ApplySchedulerTuning<ScheduleTraits<Schedule>>(args.scheduler, a.tune);
    return args;
  }
};

}  // namespace detail

// Variants of fp8_gemm_sm90_variants.cu (fp16 output only; Fp8GemmTuning::variant 1..8). Each
// returns false / cudaErrorNotSupported when the variant does not exist or cannot run the shape.
bool Fp8GemmVariantSupported(const Fp8GemmArgs& a);
size_t Fp8GemmVariantWorkspaceBytes(const Fp8GemmArgs& a);
cudaError_t LaunchFp8GemmVariant(const Fp8GemmArgs& a, void* ws, size_t ws_bytes, cudaStream_t stream);

}  // namespace sm90
}  // namespace pyquant
