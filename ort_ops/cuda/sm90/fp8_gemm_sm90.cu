// Hopper LinearFp8 GEMM (see fp8_gemm_sm90.h for the contract): CUTLASS 3.x collective builders,
// TMA + FP8 wgmma mainloop, warp-specialized cooperative kernel, epilogue visitor tree.
//
// Problem mapping. LinearFp8 computes Y[M, N] = Xq[M, K] * W[N, K]^T (both operands K-major,
// which is what FP8 wgmma wants: it has no transposed smem layouts for 8-bit types). We run the
// transposed product D = W * Xq^T in CUTLASS's coordinates (M_c, N_c, K) = (N, M, K), as the
// INT4 GEMM does, so that the token count M is the tile's N extent (64 / 128 / 256 wide) and the
// 128-row M_c tile of the cooperative kernel is filled by output channels even when M is small:
//   A_c = W      [N, K]  RowMajor (K-major) e4m3
//   B_c = Xq^T   [K, M]  ColumnMajor (K-major): exactly Xq's row-major bytes
//   D_c = Y^T    [N, M]  ColumnMajor: D_c[n, m] at m * N + n = Y[m, n] row-major
// Epilogue (EVT): D_c[n, m] = s_x[m] * (s_w[n] * acc) + bias[n], fp32, one rounding to T:
//   s_w, bias: per M_c row   -> Sm90ColBroadcast (read straight from global by each thread)
//   s_x:       per N_c column -> Sm90RowBroadcast (staged in smem, predicated on M's residue)
// Accumulation: the non-"FastAccum" FP8 mainloop, which moves the wgmma accumulators (reduced
// precision inside the tensor core) into fp32 registers every 4 k-blocks (128 K); the error
// limit of docs/ops.md covers what remains.
//
// Tiles (M_c x N_c x K = channels x tokens x K), all cooperative (2 consumer warpgroups of 64
// channels each + 1 TMA producer warpgroup), stream-K tile scheduler (splits the K loop of the
// last wave over idle SMs; deterministic reduction through the workspace):
//   128 x  64 x 128 for M <= 64
//   128 x 128 x 128 above
// No 128 x 256 tile: with the promoting FP8 mainloop each consumer thread holds the wgmma
// accumulators plus their fp32 copy (2 x 128 registers for a 64 x 256 warpgroup tile), which
// spilled (684 local loads / stores in the SASS, CUTLASS 4.2, nvcc 13.0). The FastAccum mainloop
// would not spill but accumulates in the tensor core's reduced precision over the whole K.
#include "cuda/sm90/fp8_gemm_sm90.h"

#include <mutex>

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

template <typename Element, typename TileShape>
struct Fp8Gemm {
  using ElementQ = cutlass::float_e4m3_t;
  using ElementAcc = float;
  using LayoutA = cutlass::layout::RowMajor;     // W [N, K]
  using LayoutB = cutlass::layout::ColumnMajor;  // Xq^T [K, M]
  using LayoutD = cutlass::layout::ColumnMajor;  // Y^T [N, M]
  static constexpr int kAlignQ = 16;             // 16 e4m3 = 16 bytes (TMA)
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<Element>::value;
  using ClusterShape = Shape<_1, _1, _1>;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

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
      kAlignD, cutlass::epilogue::TmaWarpSpecializedCooperative, Tree>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementQ, LayoutA, kAlignQ, ElementQ, LayoutB, kAlignQ,
      ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::StreamKScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments MakeArguments(const Fp8GemmArgs& a) {
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideD = typename Kernel::StrideD;
    // A: (n, k, l) -> n * K + k.  B: (m, k, l) -> m * K + k.  D: (n, m, l) -> m * N + n.
    StrideA stride_a = cute::make_stride(int64_t(a.k), _1{}, int64_t(0));
    StrideB stride_b = cute::make_stride(int64_t(a.k), _1{}, int64_t(0));
    StrideD stride_d = cute::make_stride(_1{}, int64_t(a.n), int64_t(0));

    cutlass::KernelHardwareInfo hw;
    hw.device_id = a.device;
    hw.sm_count = SmCount(a.device);

    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {a.n, a.m, a.k, 1},
        {reinterpret_cast<const ElementQ*>(a.w), stride_a, reinterpret_cast<const ElementQ*>(a.xq), stride_b},
        {{}, nullptr, stride_d, static_cast<Element*>(a.y), stride_d},
        hw};
    // Tree arguments: {XScale, ScaledAcc {WScale, Acc, op}, Bias, op}.
    args.epilogue.thread = {
        {a.s_x, 0.0f, {}},
        {{a.w_scale, 0.0f, {}}, {}, {}},
        {static_cast<const Element*>(a.bias), Element(0), {}},
        {}};
    // Deterministic (ordered) stream-K reduction: the same inputs give bit-identical outputs.
    args.scheduler.reduction_mode = cutlass::gemm::kernel::detail::ReductionMode::Deterministic;
    return args;
  }

  static size_t WorkspaceBytes(const Fp8GemmArgs& a) { return Gemm::get_workspace_size(MakeArguments(a)); }

  static bool CanImplement(const Fp8GemmArgs& a) {
    return Gemm::can_implement(MakeArguments(a)) == cutlass::Status::kSuccess;
  }

  static cudaError_t Run(const Fp8GemmArgs& a, void* ws, size_t ws_bytes, cudaStream_t stream) {
    typename Gemm::Arguments args = MakeArguments(a);
    if (Gemm::get_workspace_size(args) > ws_bytes) return cudaErrorInvalidValue;
    Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return cudaErrorNotSupported;
    // initialize() only fills the params struct and, for stream-K, clears the workspace's
    // barrier area with a kernel on `stream` (no allocation, no sync: capturable).
    if (gemm.initialize(args, ws, stream) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
    if (gemm.run(stream) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
    return cudaGetLastError();
  }

  static int SmCount(int device) {
    static std::mutex mu;
    static int cached[64] = {};
    std::lock_guard<std::mutex> lock(mu);
    if (device < 0 || device >= 64) return 0;
    if (cached[device] == 0) cudaDeviceGetAttribute(&cached[device], cudaDevAttrMultiProcessorCount, device);
    return cached[device];
  }
};

using NarrowTile = Shape<_128, _64, _128>;
using WideTile = Shape<_128, _128, _128>;

// Tile choice on M: the 64-token tile up to M = 64 (no padded half tile), else 128 x 128.
template <typename Element, typename F>
auto WithConfig(const Fp8GemmArgs& a, F&& f) {
  if (a.m <= 64) return f(Fp8Gemm<Element, NarrowTile>{});
  return f(Fp8Gemm<Element, WideTile>{});
}

template <typename F>
auto WithType(bool bf16, const Fp8GemmArgs& a, F&& f) {
  return bf16 ? WithConfig<cutlass::bfloat16_t>(a, f) : WithConfig<cutlass::half_t>(a, f);
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

bool Fp8GemmSupported(const Fp8GemmArgs& a, bool bf16) {
  const bool ok = a.m > 0 && a.n > 0 && a.k > 0 && a.k % 16 == 0 && a.n % 8 == 0 && Aligned16(a.xq) &&
                  Aligned16(a.w) && Aligned16(a.y) && a.s_x != nullptr && a.w_scale != nullptr;
  return ok && WithType(bf16, a, [&](auto g) { return decltype(g)::CanImplement(a); });
}

size_t Fp8GemmWorkspaceBytes(const Fp8GemmArgs& a, bool bf16) {
  return WithType(bf16, a, [&](auto g) { return decltype(g)::WorkspaceBytes(a); });
}

cudaError_t LaunchFp8Gemm(const Fp8GemmArgs& a, bool bf16, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream) {
  if (!Fp8GemmSupported(a, bf16)) return cudaErrorNotSupported;
  return WithType(bf16, a, [&](auto g) { return decltype(g)::Run(a, workspace, workspace_bytes, stream); });
}

}  // namespace sm90
}  // namespace pyquant
