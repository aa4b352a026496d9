// L2 weight prefetch grid (l2_prefetch.h: why, ordering, budget).
#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "cuda/device_info.h"
#include "cuda/env_knobs.h"
#include "cuda/l2_prefetch.h"
#include "cuda/pdl.h"

namespace pyquant {

namespace {

// Bytes per cp.async.bulk.prefetch instruction: 16 KB (a multiple of 16, as the instruction
// requires); a 20 MB budget is ~1,300 instructions over the grid's threads.
constexpr size_t kChunk = 16384;
constexpr int kThreads = 32;

struct Ranges {
  const char* ptr[kL2PrefetchMaxRanges];
  unsigned long long bytes[kL2PrefetchMaxRanges];  // multiples of 16, ptr 16-byte aligned
  unsigned long long first_chunk[kL2PrefetchMaxRanges + 1];  // prefix sums of the ranges' chunks
  int n;
};

// grid.x CTAs of kThreads threads; thread t (global index) issues chunks t, t + threads, ... of
// the ranges' concatenation. Nothing is read into the SM: the instruction only asks L2 to load.
__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(const __grid_constant__ Ranges r) {
  PdlAllowDependents();  // the kernel that reads the ranges may launch at once
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned long long total = r.first_chunk[r.n];
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * kThreads;
  int i = 0;
  for (unsigned long long c = blockIdx.x * kThreads + threadIdx.x; c < total; c += stride) {
    while (c >= r.first_chunk[i + 1]) ++i;
    const unsigned long long off = (c - r.first_chunk[i]) * kChunk;
    const unsigned size = static_cast<unsigned>(min(static_cast<unsigned long long>(kChunk), r.bytes[i] - off));
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(r.ptr[i] + off), "r"(size) : "memory");
  }
#endif
  // Completes only after the grid before it (l2_prefetch.h, "Order").
  PdlWaitPrimary();
}

}  // namespace

int64_t CudaL2PrefetchMaxM() {
  const char* v = EnvValue("PYQUANT_L2_PREFETCH");
  return v ? std::max<int64_t>(0, std::strtoll(v, nullptr, 10)) : kL2PrefetchDefaultMaxM;
}

size_t L2PrefetchBudget() {
  int device = 0;
  if (CurrentDeviceComputeCapability(&device) < 90) return 0;
  static std::mutex mu;
  static size_t cached[64] = {};
  if (device < 0 || device >= 64) return 0;
  std::lock_guard<std::mutex> lock(mu);
  if (cached[device] == 0) {
    int l2 = 0;
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
    cached[device] = static_cast<size_t>(l2) / 100 * kL2PrefetchL2Percent;
  }
  return cached[device];
}

cudaError_t LaunchL2Prefetch(const L2PrefetchRange* ranges, int n, cudaStream_t stream) {
  size_t budget = L2PrefetchBudget();
  if (budget == 0 || n <= 0 || n > kL2PrefetchMaxRanges) return cudaSuccess;
  Ranges r = {};
  r.first_chunk[0] = 0;
  for (int i = 0; i < n; ++i) {
    // Only whole 16-byte units inside the range (the instruction's alignment rule): the
    // unaligned fringes are not prefetched.
    const uintptr_t a = reinterpret_cast<uintptr_t>(ranges[i].ptr);
    const uintptr_t begin = (a + 15) & ~uintptr_t{15};
    const uintptr_t end = (a + ranges[i].bytes) & ~uintptr_t{15};
    size_t bytes = (ranges[i].ptr != nullptr && end > begin) ? end - begin : 0;
    bytes = std::min(bytes, budget);
    budget -= bytes;
    r.ptr[r.n] = reinterpret_cast<const char*>(begin);
    r.bytes[r.n] = bytes;
    r.first_chunk[r.n + 1] = r.first_chunk[r.n] + (bytes + kChunk - 1) / kChunk;
    ++r.n;
  }
  const unsigned long long chunks = r.first_chunk[r.n];
  if (chunks == 0) return cudaSuccess;
  int device = 0;
  (void)cudaGetDevice(&device);
  // One 32-thread CTA per SM at most: each fits beside a decode grid's CTAs.
  const unsigned long long sms = static_cast<unsigned long long>(std::max(1, CudaSmCount(device)));
  const unsigned long long ctas = std::min((chunks + kThreads - 1) / kThreads, sms);
  return LaunchWithPdl(l2_prefetch_kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreads), stream, true, r);
}

}  // namespace pyquant
