#include "cuda/staged_split.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace pyquant {

namespace {

struct SplitEntry {
  int device = 0;
  cudaStream_t stream = nullptr;
  float* ws = nullptr;
  size_t ws_bytes = 0;
  unsigned* flags = nullptr;
  size_t flag_count = 0;
};

std::mutex& SplitMutex() {
  static std::mutex mu;
  return mu;
}
// Deliberately never destroyed or freed: captured graphs may still use a buffer at process exit,
// and cudaFree from a static destructor can run after the CUDA runtime has shut down.
std::vector<SplitEntry>& SplitEntries() {
  static auto* entries = new std::vector<SplitEntry>();
  return *entries;
}

bool Capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone;
}

// cudaOccupancyMaxActiveClusters of one launch shape, cached (0 on an error).
int MaxActiveClusters(const void* kernel, int device, int threads, int smem, int cluster) {
  struct Key {
    const void* kernel;
    int device, threads, smem, cluster;
    int value;
  };
  static std::mutex mu;
  static auto* cache = new std::vector<Key>();
  std::lock_guard<std::mutex> lock(mu);
  for (const Key& k : *cache) {
    if (k.kernel == kernel && k.device == device && k.threads == threads && k.smem == smem && k.cluster == cluster) {
      return k.value;
    }
  }
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cluster);
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(cluster));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int value = 0;
  if (cudaOccupancyMaxActiveClusters(&value, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    value = 0;
  }
  cache->push_back(Key{kernel, device, threads, smem, cluster, value});
  return value;
}

}  // namespace

void FitStagedSplitToOneWave(const void* kernel, int threads, int smem, int64_t tiles, int max_kz, int* ks, int* kz) {
  int device = 0;
  if (*ks <= 1 || cudaGetDevice(&device) != cudaSuccess) return;
  const int64_t resident_ctas = MaxActiveClusters(kernel, device, threads, smem, 1);
  if (tiles * *ks * *kz > resident_ctas) return;  // more than one wave anyway
  while (*ks > 1 && *kz * 2 <= max_kz && tiles * *kz > MaxActiveClusters(kernel, device, threads, smem, *ks)) {
    *ks /= 2;
    *kz *= 2;
  }
}

StagedGridSplit StagedSplitBuffers(cudaStream_t stream, int kz, size_t m, size_t n, size_t flag_count) {
  StagedGridSplit none;
  if (kz <= 1) return none;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return none;
  }
  const size_t ws_bytes = size_t(kz) * m * n * sizeof(float);
  std::lock_guard<std::mutex> lock(SplitMutex());
  auto& entries = SplitEntries();
  auto it = std::find_if(entries.begin(), entries.end(),
                         [&](const SplitEntry& e) { return e.device == device && e.stream == stream; });
  if (it == entries.end()) it = entries.insert(entries.end(), SplitEntry{device, stream});
  if (it->ws_bytes < ws_bytes || it->flag_count < flag_count) {
    if (Capturing(stream)) return none;  // an uncaptured run of this shape grows them first
    if (it->ws_bytes < ws_bytes) {
      const size_t grown = std::max(ws_bytes, it->ws_bytes + it->ws_bytes / 2);
      void* p = nullptr;
      if (cudaMalloc(&p, grown) != cudaSuccess) {
        (void)cudaGetLastError();
        return none;
      }
      it->ws = static_cast<float*>(p);  // the old buffer stays allocated (captured graphs)
      it->ws_bytes = grown;
    }
    if (it->flag_count < flag_count) {
      const size_t grown = std::max(flag_count, it->flag_count + it->flag_count / 2);
      void* p = nullptr;
      if (cudaMalloc(&p, grown * sizeof(unsigned)) != cudaSuccess ||
          cudaMemsetAsync(p, 0, grown * sizeof(unsigned), stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return none;
      }
      it->flags = static_cast<unsigned*>(p);
      it->flag_count = grown;
    }
  }
  return StagedGridSplit{it->ws, it->flags, kz};
}

}  // namespace pyquant
