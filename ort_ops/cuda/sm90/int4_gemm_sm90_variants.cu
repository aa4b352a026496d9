// Benchmark-selectable variants of the Hopper MatMulInt4 GEMM (Int4GemmArgs::variant, set from
// PYQUANT_INT4_SM90_TILE at kernel creation), fp16 only (bf16 keeps the default tiles), for M
// above the Wide tile's range (M > 512; below it the default serves), in their own translation
// unit so that they compile in parallel with int4_gemm_sm90.cu. Same template, problem mapping
// (channels x tokens x K) and epilogue as the default Huge tile (128 x 256 x 64, 2x1 cluster:
// two CTAs of neighbouring channel tiles share each X tile through TMA multicast).
//
//   1 "c1":   128x256x64, 1x1 cluster (the default before the 2x1 cluster: 5-11 % slower at
//             M = 4096, bench/results/2026-11-22-h100-s4-int4-tiles-bench-cuda.md, where it is the
//             "pyquant_int4" column and the 2x1 cluster "c2n")
//   2 "c2m":  128x256x64, 1x2 cluster: two CTAs of neighbouring token tiles share each int4 tile
//   3 "k128": 128x256x128: twice the K per pipeline stage (fewer, longer stages; fewer barrier
//            round trips per decoded weight), block_size 128 / 256 only
#include "cuda/sm90/int4_gemm_sm90_kernel.cuh"

namespace pyquant {
namespace sm90 {

namespace {

using namespace cute;
using detail::Int4Gemm;
using H = cutlass::half_t;

template <typename F>
auto WithVariant(int variant, bool* found, F&& f) {
  *found = true;
  switch (variant) {
    case 1:
      return f(Int4Gemm<H, Shape<_128, _256, _64>, Shape<_1, _1, _1>>{});
    case 2:
      return f(Int4Gemm<H, Shape<_128, _256, _64>, Shape<_1, _2, _1>>{});
    case 3:
      return f(Int4Gemm<H, Shape<_128, _256, _128>, Shape<_1, _1, _1>>{});
    default:
      *found = false;
      return f(Int4Gemm<H, Shape<_128, _256, _64>, Shape<_2, _1, _1>>{});
  }
}

}  // namespace

bool Int4GemmVariantSupported(const Int4GemmArgs& a) {
  bool found = false;
  const bool ok = WithVariant(a.variant, &found, [&](auto g) { return decltype(g)::CanImplement(a); });
  return found && ok;
}

size_t Int4GemmVariantWorkspaceBytes(const Int4GemmArgs& a) {
  bool found = false;
  return WithVariant(a.variant, &found, [&](auto g) { return decltype(g)::WorkspaceBytes(a); });
}

cudaError_t LaunchInt4GemmVariant(const Int4GemmArgs& a, void* ws, size_t ws_bytes, cudaStream_t stream) {
  bool found = false;
  const bool ok = WithVariant(a.variant, &found, [&](auto g) { return decltype(g)::CanImplement(a); });
  if (!found || !ok) return cudaErrorNotSupported;
  return WithVariant(a.variant, &found, [&](auto g) { return decltype(g)::Run(a, ws, ws_bytes, stream); });
}

}  // namespace sm90
}  // namespace pyquant
