// The Hopper MatMulInt4 GEMM on a shuffled copy of the weights (int4_gemm_sm90.h: the opt-in
// PYQUANT_INT4_SHUFFLED_COPY=1, and benchmark variant 7 "shuf"): the default tiles per M
// (WithDefaultTiles) with the narrow operand in Int4ShuffleAtom order (int4_gemm_sm90_kernel.cuh;
// the same order as layout/int4_shuffled.h, whose ShuffleInt4Weights writes it),
// which CUTLASS's mixed-input mainloop reads with one 32-bit shared-memory load per thread and
// k16 step and decodes with its permute-free converters (CUTLASS example 55 describes the idea).
// fp16 and bf16. Its own translation unit, so that it
// compiles in parallel with int4_gemm_sm90.cu.
#include "cuda/sm90/int4_gemm_sm90_kernel.cuh"

namespace pyquant {
namespace sm90 {

namespace {

using namespace cute;
using detail::Int4WeightFormat;
using detail::WithDefaultTiles;

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The default tiles, or with variant 4 "p128" (fp16; PYQUANT_INT4_SM90_TILE=p128, or
// int4_gemm_sm90.cu's default rule Pingpong128ByDefault where it applies) the
// 64 x 128 ping-pong tiles on the shuffled order; variants 9 "w192" / 10 "p192" (192 tokens per
// tile, fp16; by default where Tile192ByDefault says) likewise.
template <typename F>
auto WithShuffledType(bool bf16, const Int4GemmArgs& a, F&& f) {
  using H = cutlass::half_t;
  if (bf16) return WithDefaultTiles<cutlass::bfloat16_t, Int4WeightFormat::kShuffled>(a, f);
  return detail::WithBothOrdersVariant<H, Int4WeightFormat::kShuffled>(
      a.variant, f, [&] { return WithDefaultTiles<H, Int4WeightFormat::kShuffled>(a, f); });
}

}  // namespace

size_t Int4ShuffledBytes(int n, int k) {
  if (n <= 0 || k <= 0 || n % 128 != 0 || k % 64 != 0) return 0;
  return size_t(n) * size_t(k) / 2;
}

bool Int4GemmShuffledSupported(const Int4GemmArgs& a, bool bf16) {
  if (a.b_shuffled == nullptr || !Aligned16(a.b_shuffled) || Int4ShuffledBytes(a.n, a.k) == 0) return false;
  return WithShuffledType(bf16, a, [&](auto g) { return decltype(g)::CanImplement(a); });
}

size_t Int4GemmShuffledWorkspaceBytes(const Int4GemmArgs& a, bool bf16) {
  return WithShuffledType(bf16, a, [&](auto g) { return decltype(g)::WorkspaceBytes(a); });
}

cudaError_t LaunchInt4GemmShuffled(const Int4GemmArgs& a, bool bf16, void* ws, size_t ws_bytes, cudaStream_t stream) {
  if (!Int4GemmShuffledSupported(a, bf16)) return cudaErrorNotSupported;
  return WithShuffledType(bf16, a, [&](auto g) { return decltype(g)::Run(a, ws, ws_bytes, stream); });
}

}  // namespace sm90
}  // namespace pyquant
