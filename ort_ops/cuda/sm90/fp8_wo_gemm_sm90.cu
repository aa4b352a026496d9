// Hopper GEMM of weight-only LinearFp8 (see fp8_wo_gemm_sm90.h for the contract).
//
// Problem mapping, as the INT4 GEMM's (int4_gemm_sm90.cu): the mixed-input mainloop needs the
// narrow type as wgmma's register-sourced operand A, K-major, so it runs D = W * X^T in CUTLASS's
// coordinates (M_c, N_c, K) = (N, M, K):
//   A_c = W    [N, K]  RowMajor, e4m3, converted to T in registers (CUTLASS's "convert only" mode:
//                      no scales in the mainloop)
//   B_c = X^T  [K, M]  ColumnMajor: X's row-major bytes
//   D_c = Y^T  [N, M]  ColumnMajor: Y row-major
//   epilogue   s_w[n] * acc + bias[n] (both broadcast along the rows of D_c), fp32, rounded once
// Tiles (K tile 64, cooperative schedule, stream-K scheduler with the deterministic reduction):
//   128 x 64 for M <= 64, 128 x 128 up to M = 512, 128 x 256 with a 2x1 cluster above (the INT4
//   GEMM's Narrow / Wide / Huge tiles; the mainloop differs only in the conversion).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/device_info.h"
#include "cuda/sm90/cutlass_gemm_common.h"
#include "cuda/sm90/fp8_wo_gemm_sm90.h"
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

namespace {

using namespace cute;
using detail::Cooperative;
using detail::GemmRunner;
using detail::NoCluster;
using detail::ScheduleTraits;

template <typename Element, typename TileShape, typename ClusterShape>
struct Fp8WoGemm : GemmRunner<Fp8WoGemm<Element, TileShape, ClusterShape>, Fp8WoGemmArgs> {
  using ElementQ = cutlass::float_e4m3_t;
  using ElementAcc = float;
  using LayoutA = cutlass::layout::RowMajor;     // W [N, K]
  using LayoutB = cutlass::layout::ColumnMajor;  // X^T [K, M]
  using LayoutD = cutlass::layout::ColumnMajor;  // Y^T [N, M]
  static constexpr int kAlignA = 16;             // 16 e4m3 = 16 bytes (TMA)
  static constexpr int kAlignB = 128 / cutlass::sizeof_bits<Element>::value;
  static constexpr int kAlignD = kAlignB;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
  using Schedule = Cooperative;
  using EpilogueSchedule = typename ScheduleTraits<Schedule>::EpilogueSchedule;
  using TileScheduler = typename ScheduleTraits<Schedule>::TileScheduler;

  // s_w[n] * acc + bias[n]: multiply_add(WScale, Acc, Bias), fp32, rounded once to Element.
  using WScale = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float, float>;
  using Bias = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, Element, float>;
  using Acc = cutlass::epilogue::fusion::Sm90AccFetch;
  using Tree = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, Element, float, kRound>, WScale, Acc,
      Bias>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, float, void, LayoutD, kAlignD, Element, LayoutD,
      kAlignD, EpilogueSchedule, Tree>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cute::tuple<ElementQ>, LayoutA, kAlignA, Element, LayoutB,
      kAlignB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      Schedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments MakeArguments(const Fp8WoGemmArgs& a) {
    typename Gemm::Arguments args =
        detail::SwappedGemmArguments<Gemm, ElementQ, Element, Element>(a.w, a.x, a.y, a.m, a.n, a.k, a.device);
    // Tree arguments: {WScale, Acc, Bias, op}.
    args.epilogue.thread = {{a.w_scale, 0.0f, {}}, {}, {static_cast<const Element*>(a.bias), Element(0), {}}, {}};
    // CUTLASS's stream-K heuristic with the deterministic reduction (bit-identical runs), except
    // data-parallel where the K loop is short and the tiles fit one wave (DataParallelPays).
    detail::ApplySchedulerTuning<ScheduleTraits<Schedule>>(args.scheduler, Sm90SchedulerTuning{});
    if (DataParallelPays(a, args.hw_info.sm_count)) {
      args.scheduler.decomposition_mode = cutlass::gemm::kernel::detail::DecompositionMode::DataParallel;
    }
    return args;
  }

  // The INT4 GEMM's rule (cutlass_gemm_common.h): here too, stream-K lost on short rows (H100, session
  // 32, bench/results/2026-11-27-h100-s32-fp8wo-gemm-bench-cuda.md: 576 x 1536 at M = 64 / 256 7.8 / 9.4
  // us under stream-K against 5.1 / 6.1 for the mma kernel).
  static bool DataParallelPays(const Fp8WoGemmArgs& a, int sm_count) {
    return detail::DataParallelPays<TileShape>(a.n, a.m, a.k, sm_count);
  }
};

template <typename Element, typename F>
auto WithTiles(const Fp8WoGemmArgs& a, F&& f) {
  if (a.m <= 64) return f(Fp8WoGemm<Element, Shape<_128, _64, _64>, NoCluster>{});
  if (a.m <= 512) return f(Fp8WoGemm<Element, Shape<_128, _128, _64>, NoCluster>{});
  return f(Fp8WoGemm<Element, Shape<_128, _256, _64>, Shape<_2, _1, _1>>{});
}

template <typename F>
auto WithType(bool bf16, const Fp8WoGemmArgs& a, F&& f) {
  return bf16 ? WithTiles<cutlass::bfloat16_t>(a, f) : WithTiles<cutlass::half_t>(a, f);
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

bool Fp8WoGemmSupported(const Fp8WoGemmArgs& a, bool bf16) {
  const bool ok = a.m > 0 && a.n > 0 && a.k > 0 && a.k % 16 == 0 && a.n % 8 == 0 && Aligned16(a.x) && Aligned16(a.w) &&
                  Aligned16(a.y) && a.w_scale != nullptr && (a.bias == nullptr || Aligned16(a.bias));
  return ok && WithType(bf16, a, [&](auto g) { return decltype(g)::CanImplement(a); });
}

size_t Fp8WoGemmWorkspaceBytes(const Fp8WoGemmArgs& a, bool bf16) {
  return WithType(bf16, a, [&](auto g) { return decltype(g)::WorkspaceBytes(a); });
}

cudaError_t LaunchFp8WoGemm(const Fp8WoGemmArgs& a, bool bf16, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream) {
  if (!Fp8WoGemmSupported(a, bf16)) return cudaErrorNotSupported;
  return WithType(bf16, a, [&](auto g) { return decltype(g)::Run(a, workspace, workspace_bytes, stream); });
}

}  // namespace sm90
}  // namespace pyquant
