#include "cuda/staged_split.h"

#include <mutex>
#include <vector>

#include "cuda/device_info.h"
#include "cuda/stream_buffers.h"

namespace pyquant {

namespace {

// The split's buffers, per (device, stream) and process-wide (staged_split.h says why sharing them
// is safe). Deliberately never destroyed or freed: captured graphs may still use a buffer at process
// exit, and cudaFree from a static destructor can run after the CUDA runtime has shut down.
StreamBuffers& SplitPartials() {
  static auto* buffers = new StreamBuffers(/*zero_new=*/false);
  return *buffers;
}
StreamBuffers& SplitCounters() {
  static auto* buffers = new StreamBuffers(/*zero_new=*/true);  // counters start at 0
  return *buffers;
}

// cudaOccupancyMaxActiveClusters of one launch shape, cached (0 on an error); cluster = 0: no
// cluster launch, the CTAs per SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor) times the SMs,
// which needs no cluster support (GPUs before sm_90).
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
  int value = 0;
  if (cluster == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&value, kernel, threads, static_cast<size_t>(smem)) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      value = 0;
    }
    value *= CudaSmCount(device);
    cache->push_back(Key{kernel, device, threads, smem, cluster, value});
    return value;
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
  if (cudaOccupancyMaxActiveClusters(&value, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    value = 0;
  }
  cache->push_back(Key{kernel, device, threads, smem, cluster, value});
  return value;
}

}  // namespace

int ResidentCtas(const void* kernel, int threads, int smem) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  return MaxActiveClusters(kernel, device, threads, smem, 0);
}

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
  // Too small during capture (an uncaptured run of this shape grows them first) or an allocation
  // error (cleared): no second level.
  const StreamBuffers::Result ws = SplitPartials().Get(stream, size_t(kz) * m * n * sizeof(float));
  if (ws.status != StreamBuffers::Status::kOk) return none;
  const StreamBuffers::Result flags = SplitCounters().Get(stream, flag_count * sizeof(unsigned));
  if (flags.status != StreamBuffers::Status::kOk) return none;
  return StagedGridSplit{static_cast<float*>(ws.data), static_cast<unsigned*>(flags.data), kz};
}

}  // namespace pyquant
