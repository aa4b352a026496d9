// Benchmark-selectable variants of the Hopper MatMulInt4 GEMM (Int4GemmArgs::variant, set from
// PYQUANT_INT4_SM90_TILE at kernel creation), fp16 only (bf16 keeps the default tiles); a
// selected variant serves every M that takes the Hopper path. In their own translation unit so
// that they compile in parallel with int4_gemm_sm90.cu. Same template, problem mapping
// (channels x tokens x K) and epilogue as the defaults (int4_gemm_sm90.cu; above M = 512 the Huge
// tile 128 x 256 x 64 with a 2x1 cluster: two CTAs of neighbouring channel tiles share each X
// tile through TMA multicast).
//
//   1 "c1":   128x256x64, 1x1 cluster (the default before the 2x1 cluster: 5-11 % slower at
//             M = 4096, bench/results/2026-11-22-h100-s4-int4-tiles-bench-cuda.md, where it is the
//             "pyquant_int4" column and the 2x1 cluster "c2n")
//   2 "c2m":  128x256x64, 1x2 cluster: two CTAs of neighbouring token tiles share each int4 tile
//   3 "k128": 128x256x128: twice the K per pipeline stage (fewer, longer stages; fewer barrier
//            round trips per decoded weight), block_size 128 / 256 only
//   4 "p128": 64x128x64 ping-pong: the two consumer warpgroups own separate 64-channel tiles and
//            take turns on the tensor cores, so one warpgroup's int4 decode (and epilogue) runs
//            while the other's wgmmas do; the cooperative kernel decodes in both warpgroups at
//            once, leaving the tensor cores idle meanwhile (the limit at M = 64..512)
//   5 "p256": 64x256x64 ping-pong (each decoded weight feeds 256 tokens)
//   6 "p64":  64x64x64 ping-pong (M <= 64: twice the channel tiles of the Narrow default)
//   7 "shuf": the default tiles on the shuffled weight copy (the op makes the copy for it, as for
//             PYQUANT_INT4_SHUFFLED_COPY=1; int4_gemm_sm90_shuffled.cu), fp16 and bf16
//   8 "coop": the default tiles without int4_gemm_sm90.cu's ping-pong rule (not a tile of its own)
//   9 "w192": 128x192x64 cooperative, 10 "p192": 64x192x64 ping-pong (session 42; the default
//             where int4_gemm_sm90.cu's Tile192ByDefault says since session 43, measurements
//             there): 192 tokens per tile for 128 < M <= 192, where the other tiles pad M to 256 (the
//             Mid 64 x 256 ping-pong tiles: 4096 x 14336 at M = 192 took 67.1 us against 57.6 at
//             M = 256, bench/results/2026-11-28-h200-s42-p128-bench-cuda.md); with 128-channel
//             tiles the 14336-channel layer is 112 tiles, one wave. Both also on the shuffled order.
#include "cuda/sm90/int4_gemm_sm90_kernel.cuh"

namespace pyquant {
namespace sm90 {

namespace {

using namespace cute;
using detail::Int4Gemm;
using H = cutlass::half_t;
using detail::NoCluster;
using detail::Pingpong;

template <typename F>
auto WithVariant(int variant, bool* found, F&& f) {
  *found = true;
  // 4 "p128", 9 "w192", 10 "p192": the variants shared with the shuffled order.
  return detail::WithBothOrdersVariant<H, detail::Int4WeightFormat::kPacked>(variant, f, [&] {
    switch (variant) {
      case 1: return f(Int4Gemm<H, Shape<_128, _256, _64>, Shape<_1, _1, _1>>{});
      case 2: return f(Int4Gemm<H, Shape<_128, _256, _64>, Shape<_1, _2, _1>>{});
      case 3: return f(Int4Gemm<H, Shape<_128, _256, _128>, Shape<_1, _1, _1>>{});
      case 5: return f(Int4Gemm<H, Shape<_64, _256, _64>, NoCluster, Pingpong>{});
      case 6: return f(Int4Gemm<H, Shape<_64, _64, _64>, NoCluster, Pingpong>{});
      default: *found = false; return f(Int4Gemm<H, Shape<_128, _256, _64>, Shape<_2, _1, _1>>{});
    }
  });
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
