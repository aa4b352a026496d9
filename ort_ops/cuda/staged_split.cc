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

}  // namespace

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
