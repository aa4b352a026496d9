// Hopper MatMulInt4 GEMM (see int4_gemm_sm90.h for the contract): CUTLASS 3.x collective
// builders, mixed-input wgmma mainloop (TMA loads, the narrow operand decoded in registers).
//
// Problem mapping. MatMulInt4 computes Y[M, N] = X[M, K] * W[N, K]^T. The mixed-input mainloop
// needs the narrow (int4) type as wgmma's register-sourced operand A, K-major, so we run the
// transposed product D = W * X^T in CUTLASS's coordinates (M_c, N_c, K) = (N, M, K):
//   A_c = W      [N, K]  RowMajor (K-major), uint4 codes; row stride = row_bytes * 2 elements
//                        (MatMulInt4's rows are padded to whole blocks; TMA reads only k < K)
//   B_c = X^T    [K, M]  ColumnMajor (K-major): exactly X's row-major bytes
//   D_c = Y^T    [N, M]  ColumnMajor: D_c[n, m] at m * N + n = Y[m, n] row-major
//   scales / zeros [N, n_blocks] as MN-major tensors, i.e. stored [n_blocks, N] (prepared)
//   bias[n]      a per-row (M_c) broadcast in the epilogue: D = acc + bias, rounded once to T
// No software transposes at run time: only the views differ.
//
// Tiles. K tile 64 (one 128-byte TMA row of fp16), so block_size must be a multiple of 64.
// Three configurations, all "cooperative" (2 consumer warpgroups of 64 rows of M_c each + 1 TMA
// producer warpgroup) with the stream-K tile scheduler, which splits the K loop of the last wave
// over the idle SMs (deterministic reduction of the partial tiles in the workspace): without it,
// M = 64..256 gives only N / 128 tiles, e.g. 32 CTAs for N = 4096 on a 132-SM H100.
//   Narrow: 128 (N) x  64 (M) x 64 (K)   for M <= 64
//   Wide:   128 (N) x 128 (M) x 64 (K)   for M <= 512
//   Huge:   128 (N) x 256 (M) x 64 (K)   above: the int4 decode (in the consumer warpgroups, per
//           K tile) is amortised over twice the columns; measured 0.7-0.8x of cuBLAS fp16 with
//           the 128-wide tile at M = 4096 (bench/results/2026-11-22-h100-bench-cuda-int4.md)
#include "cuda/sm90/int4_gemm_sm90.h"

#include "cuda/device_info.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <mutex>

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

namespace {

using namespace cute;

template <typename Element, typename TileShape>
struct Int4Gemm {
  using ElementQ = cutlass::uint4b_t;  // codes 0..15; the zero point comes in through zeros_t
  using ElementAcc = float;
  using LayoutA = cutlass::layout::RowMajor;     // W [N, K], K-major
  using LayoutB = cutlass::layout::ColumnMajor;  // X^T [K, M], K-major
  using LayoutD = cutlass::layout::ColumnMajor;  // Y^T [N, M]
  static constexpr int kAlignA = 128 / cutlass::sizeof_bits<ElementQ>::value;  // 32 codes = 16 bytes
  static constexpr int kAlignB = 128 / cutlass::sizeof_bits<Element>::value;   // 8 elements
  static constexpr int kAlignD = kAlignB;
  using ClusterShape = Shape<_1, _1, _1>;

  // D = 1 * acc + bias[row], C absent (void: no smem, no load).
  using Fusion = cutlass::epilogue::fusion::LinCombPerRowBias<Element, float, Element, Element, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, float, void, LayoutD, kAlignD, Element, LayoutD,
      kAlignD, cutlass::epilogue::TmaWarpSpecializedCooperative, Fusion>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cute::tuple<ElementQ, Element, Element>, LayoutA, kAlignA,
      Element, LayoutB, kAlignB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::StreamKScheduler>;
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
    // Stream-K with the deterministic (ordered) reduction of partial tiles: the same inputs give
    // bit-identical outputs run to run.
    args.scheduler.reduction_mode = cutlass::gemm::kernel::detail::ReductionMode::Deterministic;
    return args;
  }

  static size_t WorkspaceBytes(const Int4GemmArgs& a) { return Gemm::get_workspace_size(MakeArguments(a)); }

  // CUTLASS's own check (TMA alignment of every operand's extents, e.g. K % 32 == 0 for the int4
  // operand, scale-group vs K tile), on top of our pointer checks.
  static bool CanImplement(const Int4GemmArgs& a) {
    return Gemm::can_implement(MakeArguments(a)) == cutlass::Status::kSuccess;
  }

  static cudaError_t Run(const Int4GemmArgs& a, void* ws, size_t ws_bytes, cudaStream_t stream) {
    typename Gemm::Arguments args = MakeArguments(a);
    if (Gemm::get_workspace_size(args) > ws_bytes) return cudaErrorInvalidValue;
    Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return cudaErrorNotSupported;
    if (gemm.initialize(args, ws, stream) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
    if (gemm.run(stream) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
    return cudaGetLastError();
  }
};

using NarrowTile = Shape<_128, _64, _64>;
using WideTile = Shape<_128, _128, _64>;
using HugeTile = Shape<_128, _256, _64>;  // each decoded weight feeds 256 columns of X
constexpr int kNarrowMaxM = 64;
constexpr int kWideMaxM = 512;

// One tile configuration per M range; F is called with the chosen Int4Gemm<Element, Tile>.
template <typename Element, typename F>
auto WithConfig(const Int4GemmArgs& a, F&& f) {
  if (a.m <= kNarrowMaxM) return f(Int4Gemm<Element, NarrowTile>{});
  if (a.m <= kWideMaxM) return f(Int4Gemm<Element, WideTile>{});
  return f(Int4Gemm<Element, HugeTile>{});
}

template <typename F>
auto WithType(bool bf16, const Int4GemmArgs& a, F&& f) {
  return bf16 ? WithConfig<cutlass::bfloat16_t>(a, f) : WithConfig<cutlass::half_t>(a, f);
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

bool Int4GemmSupported(const Int4GemmArgs& a, bool bf16) {
  const bool block_ok = a.block_size == 64 || a.block_size == 128 || a.block_size == 256;
  const bool ok = block_ok && a.m > 0 && a.n > 0 && a.k > 0 && a.k % 32 == 0 && a.n % 8 == 0 &&
                  a.row_bytes % 16 == 0 && Aligned16(a.x) && Aligned16(a.b) && Aligned16(a.y) &&
                  Aligned16(a.scales_t) && Aligned16(a.zeros_t) && (a.bias == nullptr || Aligned16(a.bias));
  return ok && WithType(bf16, a, [&](auto g) { return decltype(g)::CanImplement(a); });
}

size_t Int4GemmWorkspaceBytes(const Int4GemmArgs& a, bool bf16) {
  return WithType(bf16, a, [&](auto g) { return decltype(g)::WorkspaceBytes(a); });
}

cudaError_t LaunchInt4Gemm(const Int4GemmArgs& a, bool bf16, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  if (!Int4GemmSupported(a, bf16)) return cudaErrorNotSupported;
  return WithType(bf16, a, [&](auto g) { return decltype(g)::Run(a, workspace, workspace_bytes, stream); });
}

}  // namespace sm90
}  // namespace pyquant
