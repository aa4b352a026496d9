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

// The shuffled weight copy (Int4WeightFormat::kShuffled): each 16 x 16 (N x K)
// block of codes is stored as the 128 bytes that the 32 threads of one warp hold as the A operand
// of a register-sourced m64nNk16 wgmma (one warp's 16 rows), each thread's 8 codes in one 32-bit
// word, so that the consumer warpgroups load a k16 slice with one 32-bit shared-memory load per
// thread and decode it without byte permutes. In the A fragment, lane = 4 g + c holds
//   v = e + 2 h + 4 f  at  (row g + 8 h, k 2 c + e + 8 f)      (g < 8, c < 4; e, h, f < 2)
// and code v of a lane sits in nibble 4 e + h + 2 f of its word, i.e. the word holds
//   nibble:  7    6    5    4    3    2    1    0
//   v:       v7   v5   v3   v1   v6   v4   v2   v0
// so that nibbles i and i + 4 (extracted together by one lop3 with mask 0x000F000F) are the pair
// (v_2i, v_2i+1) of one 32-bit fp16x2 MMA register (CUTLASS's LayoutAwareConvert specialisations
// for this value order). Byte offset of code (row, k) inside the block:
//   nibble = 32 g + 8 c + 4 e + h + 2 f, row = g + 8 h, k = e + 2 c + 8 f.
// The blocks tile the N x K matrix column-major (N fastest), as cute::tile_to_shape lays them out.
using Int4ShuffleAtom =
    cute::Layout<cute::Shape<cute::Shape<cute::_8, cute::_2>, cute::Shape<cute::_2, cute::_4, cute::_2>>,
                 cute::Stride<cute::Stride<cute::_32, cute::_1>, cute::Stride<cute::_4, cute::_8, cute::_2>>>;
using Int4ShuffledLayout = decltype(cute::tile_to_shape(Int4ShuffleAtom{}, cute::make_shape(int{}, int{}, int{})));
CUTE_HOST_DEVICE Int4ShuffledLayout MakeInt4ShuffledLayout(int n, int k) {
  return cute::tile_to_shape(Int4ShuffleAtom{}, cute::make_shape(n, k, 1));
}

// The narrow operand of the GEMM.
//   kPacked:   MatMulInt4's B in place: uint4 codes q, w = q * s + zeros_t (zeros_t = -zp * s)
//   kShuffled: the shuffled copy of B (above), same codes and decode
// (A third format, signed codes q - 8 with the scale alone for symmetric weights, measured no
// faster than kShuffled on the H100: bench/results/2026-11-23-h100-s8-int4-shuf-bench-cuda.md,
// "sshuf"; removed.)
// (Also measured and removed, session 16 (code: git show 2dd8bcf): our own consumer mainloop on
// kShuffled, one 32-bit shared-memory load + 3 shifts + 4 lop3 + 8 half2 ops per k16 step with
// scales / zeros read once per k-tile and the next tile's words prefetched into registers. Even
// with CUTLASS's mainloop within +-4 % at M = 64 ... 4096 on all four benchmark layers
// (bench/results/2026-11-24-h100-s16-decode2-bench-cuda.md): CUTLASS's converters on this order
// are already that lean (M = 256, 14336 x 4096: 17.9 M warp instructions, 18.6 M for our first
// version, 24.1 M on the row-major B: …-s16-ncu-int4-decode-*-m256-14336x4096.txt).
// What limits the mixed-input GEMM at M = 64 ... 256 is latency with 8 consumer warps per SM,
// not the decode's instruction count.)
enum class Int4WeightFormat { kPacked, kShuffled };

// Schedule: cooperative (default) or ping-pong; what follows from it: cutlass_gemm_common.h. In the
// ping-pong kernel one warpgroup decodes int4 while the other's wgmmas run.
template <typename Element, typename TileShape, typename ClusterShape_ = cute::Shape<cute::_1, cute::_1, cute::_1>,
          typename Schedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative,
          Int4WeightFormat kFormat = Int4WeightFormat::kPacked>
struct Int4Gemm : GemmRunner<Int4Gemm<Element, TileShape, ClusterShape_, Schedule, kFormat>, Int4GemmArgs> {
  static constexpr bool kShuffledB = kFormat == Int4WeightFormat::kShuffled;
  using ElementQ = cutlass::uint4b_t;  // codes 0..15; the zero point comes in through zeros_t
  using ElementAcc = float;
  // W [N, K], K-major, or the shuffled copy's cute layout
  using LayoutA = std::conditional_t<kShuffledB, Int4ShuffledLayout, cutlass::layout::RowMajor>;
  using LayoutB = cutlass::layout::ColumnMajor;                                // X^T [K, M], K-major
  using LayoutD = cutlass::layout::ColumnMajor;                                // Y^T [N, M]
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
    StrideA stride_a = [&] {
      if constexpr (kShuffledB) {
        return MakeInt4ShuffledLayout(a.n, a.k);
      } else {
        return cute::make_stride(int64_t(a.row_bytes) * 2, _1{}, int64_t(0));
      }
    }();
    const uint8_t* b = kShuffledB ? a.b_shuffled : a.b;
    StrideB stride_b = cute::make_stride(int64_t(a.k), _1{}, int64_t(0));
    StrideD stride_d = cute::make_stride(_1{}, int64_t(a.n), int64_t(0));
    StrideS stride_s = cute::make_stride(_1{}, int64_t(a.n), int64_t(0));  // (n, g, l) -> g * N + n

    cutlass::KernelHardwareInfo hw;
    hw.device_id = a.device;
    hw.sm_count = CudaSmCount(a.device);

    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {a.n, a.m, a.k, 1},
        {reinterpret_cast<const ElementQ*>(b), stride_a, static_cast<const Element*>(a.x), stride_b,
         static_cast<const Element*>(a.scales_t), stride_s, a.block_size, static_cast<const Element*>(a.zeros_t)},
        {{}, nullptr, stride_d, static_cast<Element*>(a.y), stride_d},
        hw};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.thread.bias_ptr = static_cast<const Element*>(a.bias);
    // Scheduler (stream-K heuristic, deterministic reduction: the same inputs give bit-identical
    // outputs run to run, unless a.sched asks otherwise): ApplySchedulerTuning.
    // Measured and not kept (session 50, H200): rastering along the channels in pairs
    // (PYQUANT_INT4_SM90_RASTER=m, _SWIZZLE=2) from M = 2048. Against CUTLASS's order in three runs
    // at M = 4096, 4096 x 14336 / 14336 x 4096: -4.0 / +1.0 %, -2.5 / -2.6 %, then, as the default,
    // +2.4 / +2.2 % (bench/results/2026-11-29-h200-s50-{int4knobs,int4rm2,raster}-bench-cuda.md):
    // within the run-to-run spread.
    ApplySchedulerTuning<ScheduleTraits<Schedule>>(args.scheduler, a.sched);
    if constexpr (!kPingpong) {
      if (a.decomposition_auto && DataParallelPays(a, hw.sm_count)) {
        args.scheduler.decomposition_mode = cutlass::gemm::kernel::detail::DecompositionMode::DataParallel;
      }
    }
    return args;
  }

  // Data-parallel where the K loop is short and the tiles fit one wave (cutlass_gemm_common.h).
  static bool DataParallelPays(const Int4GemmArgs& a, int sm_count) {
    return detail::DataParallelPays<TileShape>(a.n, a.m, a.k, sm_count);
  }
};

// The 64 x 128 ping-pong tiles (kInt4Sm90TilePingpong128, "p128"): a benchmark variant on either
// weight order, and int4_gemm_sm90.cu's default where Pingpong128ByDefault says.
template <typename Element, Int4WeightFormat kFormat>
using Pingpong128Gemm = Int4Gemm<Element, cute::Shape<cute::_64, cute::_128, cute::_64>, NoCluster, Pingpong, kFormat>;
// 192 tokens per tile ("w192", "p192", kInt4Sm90TileWide192 / Pingpong192; int4_gemm_sm90.cu's
// default where Tile192ByDefault says), on either weight order: cooperative 128 channels, or
// ping-pong 64 channels.
template <typename Element, Int4WeightFormat kFormat>
using Wide192Gemm = Int4Gemm<Element, cute::Shape<cute::_128, cute::_192, cute::_64>, NoCluster,
                             cutlass::gemm::KernelTmaWarpSpecializedCooperative, kFormat>;
template <typename Element, Int4WeightFormat kFormat>
using Pingpong192Gemm = Int4Gemm<Element, cute::Shape<cute::_64, cute::_192, cute::_64>, NoCluster, Pingpong, kFormat>;

// The tile variants defined on both weight orders ("p128", "w192", "p192"): f called with the
// Int4Gemm that `variant` names, else other() for any other variant. The one mapping of these
// numbers for int4_gemm_sm90_variants.cu (row-major B) and int4_gemm_sm90_shuffled.cu.
template <typename Element, Int4WeightFormat kFormat, typename F, typename Other>
auto WithBothOrdersVariant(int variant, F&& f, Other&& other) {
  switch (variant) {
    case kInt4Sm90TilePingpong128: return f(Pingpong128Gemm<Element, kFormat>{});
    case kInt4Sm90TileWide192: return f(Wide192Gemm<Element, kFormat>{});
    case kInt4Sm90TilePingpong192: return f(Pingpong192Gemm<Element, kFormat>{});
    default: return other();
  }
}

// The default tile configuration per M range (int4_gemm_sm90.cu explains the choice); F is called
// with the chosen Int4Gemm<Element, Tile, Cluster, Schedule, kFormat>.
constexpr int kNarrowMaxM = 64;
constexpr int kWideMaxM = 512;
template <typename Element, Int4WeightFormat kFormat, typename F>
auto WithDefaultTiles(const Int4GemmArgs& a, F&& f) {
  using NarrowTile = Shape<_128, _64, _64>;
  using WideTile = Shape<_128, _128, _64>;
  using HugeTile = Shape<_128, _256, _64>;  // each decoded weight feeds 256 columns of X
  using HugeCluster = Shape<_2, _1, _1>;
  using MidTile = Shape<_64, _256, _64>;  // ping-pong
  using Cooperative = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  if (a.m <= kNarrowMaxM) return f(Int4Gemm<Element, NarrowTile, NoCluster, Cooperative, kFormat>{});
  if (a.m <= kWideMaxM) {
    // 64 x 256 ping-pong tiles where they fill the GPU and pad no more than Wide does.
    const int64_t mid_tiles = int64_t((a.n + 63) / 64) * ((a.m + 255) / 256);
    if (a.m > 128 && 4 * mid_tiles >= 3 * int64_t(CudaSmCount(a.device))) {
      return f(Int4Gemm<Element, MidTile, NoCluster, Pingpong, kFormat>{});
    }
    return f(Int4Gemm<Element, WideTile, NoCluster, Cooperative, kFormat>{});
  }
  return f(Int4Gemm<Element, HugeTile, HugeCluster, Cooperative, kFormat>{});
}

}  // namespace detail
}  // namespace sm90
}  // namespace pyquant
