// KVCacheWrite's CUDA kernel (kv_cache_write.h).
#include <cstdint>

#include "cuda/kv_cache_write.h"

namespace pyquant {

namespace {

// grid = (steps, rows); block = 128 threads. CTA (s, r) copies fresh[r, s, :] (slot_bytes bytes)
// to present[r, slots[s], :] in Word-sized pieces (Word = uint4 when every address and
// slot_bytes are 16-byte multiples, else uint32_t / uint8_t). Why a CTA per entry: a decode
// step writes batch * kv_heads entries of head_dim elements (Llama-3-8B: 8 x 8 entries of 256
// bytes), so there is no more parallelism to find and the launch is the cost.
template <typename Word>
__global__ void kv_cache_write_kernel(const uint8_t* __restrict__ fresh, const int64_t* __restrict__ slots,
                                      uint8_t* __restrict__ present, int64_t length, int64_t steps,
                                      int64_t slot_bytes) {
  const int64_t s = blockIdx.x, r = blockIdx.y;
  const int64_t slot = slots[s];
  if (slot < 0 || slot >= length) return;
  const Word* src = reinterpret_cast<const Word*>(fresh + (r * steps + s) * slot_bytes);
  Word* dst = reinterpret_cast<Word*>(present + (r * length + slot) * slot_bytes);
  const int64_t words = slot_bytes / static_cast<int64_t>(sizeof(Word));
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
}

bool Aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace

cudaError_t LaunchKvCacheWrite(const KvCacheWriteProblem& p, cudaStream_t stream) {
  if (!p.in_place() && p.rows * p.length * p.slot_bytes > 0) {
    const cudaError_t err = cudaMemcpyAsync(p.present, p.past, static_cast<size_t>(p.rows * p.length * p.slot_bytes),
                                            cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess) return err;
  }
  if (p.rows == 0 || p.steps == 0 || p.slot_bytes == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(p.steps), static_cast<unsigned>(p.rows));
  const auto all = [&](uintptr_t a) {
    return Aligned(p.fresh, a) && Aligned(p.present, a) && p.slot_bytes % static_cast<int64_t>(a) == 0;
  };
  if (all(16)) {
    kv_cache_write_kernel<uint4>
        <<<grid, 128, 0, stream>>>(p.fresh, p.slots, p.present, p.length, p.steps, p.slot_bytes);
  } else if (all(4)) {
    kv_cache_write_kernel<uint32_t>
        <<<grid, 128, 0, stream>>>(p.fresh, p.slots, p.present, p.length, p.steps, p.slot_bytes);
  } else {
    kv_cache_write_kernel<uint8_t>
        <<<grid, 128, 0, stream>>>(p.fresh, p.slots, p.present, p.length, p.steps, p.slot_bytes);
  }
  return cudaGetLastError();
}

}  // namespace pyquant
