// The Hopper MatMulInt4 GEMM on a shuffled copy of the weights (int4_gemm_sm90.h: the opt-in
// PYQUANT_INT4_SHUFFLED_COPY=1, and benchmark variant 7 "shuf"): the default tiles per M
// (WithDefaultTiles) with the narrow operand in Int4ShuffleAtom order (int4_gemm_sm90_kernel.cuh),
// which CUTLASS's mixed-input mainloop reads with one 32-bit shared-memory load per thread and
// k16 step and decodes with its permute-free converters (CUTLASS example 55 describes the idea);
// and the kernel that writes that copy. fp16 and bf16. Its own translation unit, so that it
// compiles in parallel with int4_gemm_sm90.cu.
#include "cuda/sm90/int4_gemm_sm90_kernel.cuh"

namespace pyquant {
namespace sm90 {

namespace {

using namespace cute;
using detail::Int4WeightFormat;
using detail::WithDefaultTiles;

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// One thread per source byte b[row, kb] (codes k = 2 kb, 2 kb + 1 of row `row`): each code is
// OR-ed into its nibble of the zeroed destination (a 32-bit word holds one thread fragment, which
// several source bytes share: atomicOr).
__global__ void int4_shuffle_kernel(const uint8_t* __restrict__ b, int row_bytes, int n, int k,
                                    uint32_t* __restrict__ dst) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int half_k = k / 2;
  if (i >= int64_t(n) * half_k) return;
  const int row = static_cast<int>(i / half_k), kb = static_cast<int>(i % half_k);
  const uint32_t byte = b[int64_t(row) * row_bytes + kb];
  const auto layout = detail::MakeInt4ShuffledLayout(n, k);
  for (int j = 0; j < 2; ++j) {
    const int64_t nibble = layout(row, 2 * kb + j, 0);
    atomicOr(dst + nibble / 8, ((byte >> (4 * j)) & 0xFu) << (4 * (nibble % 8)));
  }
}

template <typename F>
auto WithShuffledType(bool bf16, const Int4GemmArgs& a, F&& f) {
  return bf16 ? WithDefaultTiles<cutlass::bfloat16_t, Int4WeightFormat::kShuffled>(a, f)
              : WithDefaultTiles<cutlass::half_t, Int4WeightFormat::kShuffled>(a, f);
}

}  // namespace

size_t Int4ShuffledBytes(int n, int k) {
  if (n <= 0 || k <= 0 || n % 128 != 0 || k % 64 != 0) return 0;
  return size_t(n) * size_t(k) / 2;
}

cudaError_t PrepareInt4ShuffledWeights(const uint8_t* b, int row_bytes, int n, int k, void* dst, cudaStream_t stream) {
  const size_t bytes = Int4ShuffledBytes(n, k);
  if (bytes == 0 || row_bytes * 2 < k) return cudaErrorInvalidValue;
  cudaError_t e = cudaMemsetAsync(dst, 0, bytes, stream);
  if (e != cudaSuccess) return e;
  const int64_t total = int64_t(n) * (k / 2);
  int4_shuffle_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(b, row_bytes, n, k,
                                                                                      static_cast<uint32_t*>(dst));
  return cudaGetLastError();
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
