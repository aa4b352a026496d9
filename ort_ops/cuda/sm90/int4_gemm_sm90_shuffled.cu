// Benchmark variants 7 "shuf" and 8 "sshuf" of the Hopper MatMulInt4 GEMM (int4_gemm_sm90.h):
// the default tiles per M (WithDefaultTiles) on a shuffled copy of the weights, fp16 only, and the
// kernel that writes that copy. The layout is Int4ShuffleAtom (int4_gemm_sm90_kernel.cuh), the
// narrow-operand order CUTLASS's mixed-input mainloop reads with one 32-bit load per thread and
// k16 step and decodes with its permute-free converters (CUTLASS example 55 describes the idea).
// An experiment to measure what that order is worth at M = 64 ... 4096; a production version
// would keep a single (shuffled) device copy of B.
#include "cuda/sm90/int4_gemm_sm90_kernel.cuh"

namespace pyquant {
namespace sm90 {

namespace {

using namespace cute;
using detail::Int4WeightFormat;
using detail::WithDefaultTiles;
using H = cutlass::half_t;

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// One thread per source byte b[row, kb] (codes k = 2 kb, 2 kb + 1 of row `row`): each code is
// OR-ed into its nibble of the zeroed destination (one 32-bit word holds one thread-fragment, so
// several source bytes meet in a word: atomicOr). signed_codes: code XOR 8 = q - 8 as int4.
__global__ void int4_shuffle_kernel(const uint8_t* __restrict__ b, int row_bytes, int n, int k, bool signed_codes,
                                    uint32_t* __restrict__ dst) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int half_k = k / 2;
  if (i >= int64_t(n) * half_k) return;
  const int row = static_cast<int>(i / half_k), kb = static_cast<int>(i % half_k);
  uint32_t byte = b[int64_t(row) * row_bytes + kb];
  if (signed_codes) byte ^= 0x88u;
  const auto layout = detail::MakeInt4ShuffledLayout(n, k);
  for (int j = 0; j < 2; ++j) {
    const int64_t nibble = layout(row, 2 * kb + j, 0);
    atomicOr(dst + nibble / 8, ((byte >> (4 * j)) & 0xFu) << (4 * (nibble % 8)));
  }
}

template <typename F>
auto WithShuffledVariant(const Int4GemmArgs& a, F&& f) {
  if (a.variant == 8) return WithDefaultTiles<H, Int4WeightFormat::kShuffledSigned>(a, f);
  return WithDefaultTiles<H, Int4WeightFormat::kShuffled>(a, f);
}

}  // namespace

int Int4GemmVariantWeightCopy(int variant) { return variant == 7 ? 1 : variant == 8 ? 2 : 0; }

size_t Int4ShuffledBytes(int n, int k) {
  if (n <= 0 || k <= 0 || n % 128 != 0 || k % 64 != 0) return 0;
  return size_t(n) * size_t(k) / 2;
}

cudaError_t PrepareInt4ShuffledWeights(const uint8_t* b, int row_bytes, int n, int k, bool signed_codes, void* dst,
                                       cudaStream_t stream) {
  const size_t bytes = Int4ShuffledBytes(n, k);
  if (bytes == 0 || row_bytes * 2 < k) return cudaErrorInvalidValue;
  cudaError_t e = cudaMemsetAsync(dst, 0, bytes, stream);
  if (e != cudaSuccess) return e;
  const int64_t total = int64_t(n) * (k / 2);
  int4_shuffle_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(
      b, row_bytes, n, k, signed_codes, static_cast<uint32_t*>(dst));
  return cudaGetLastError();
}

bool Int4GemmShuffledSupported(const Int4GemmArgs& a) {
  const int copy = Int4GemmVariantWeightCopy(a.variant);
  if (copy == 0 || a.b_shuffled == nullptr || !Aligned16(a.b_shuffled) || Int4ShuffledBytes(a.n, a.k) == 0) {
    return false;
  }
  if (copy == 2 && !a.symmetric) return false;
  return WithShuffledVariant(a, [&](auto g) { return decltype(g)::CanImplement(a); });
}

size_t Int4GemmShuffledWorkspaceBytes(const Int4GemmArgs& a) {
  return WithShuffledVariant(a, [&](auto g) { return decltype(g)::WorkspaceBytes(a); });
}

cudaError_t LaunchInt4GemmShuffled(const Int4GemmArgs& a, void* ws, size_t ws_bytes, cudaStream_t stream) {
  if (!Int4GemmShuffledSupported(a)) return cudaErrorNotSupported;
  return WithShuffledVariant(a, [&](auto g) { return decltype(g)::Run(a, ws, ws_bytes, stream); });
}

}  // namespace sm90
}  // namespace pyquant
