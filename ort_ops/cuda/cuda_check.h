// CUDA error -> OpError, for the ORT op structs (launchers return cudaError_t).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "common/ort_api.h"

namespace pyquant {

inline void ThrowOnCudaError(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw OpError(std::string(what) + ": CUDA error " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")",
                  ORT_EP_FAIL);
  }
}

inline cudaStream_t ComputeStream(OrtKernelContext* ctx) {
  void* stream = nullptr;
  ThrowOnError(Api().KernelContext_GetGPUComputeStream(ctx, &stream));
  return static_cast<cudaStream_t>(stream);
}

// Device scratch owned by one kernel (node): grown with cudaMalloc outside CUDA-graph capture,
// never freed before the kernel, because a captured graph keeps using the buffer it was captured
// with (ORT's per-run scratch allocator failed inside ORT's CUDA-graph capture: onnxruntime-gpu
// 1.31, BFCArena "Failed to allocate"). ORT runs a graph's first run uncaptured, which grows the
// buffer for that shape. Callers serialise Get() and the launch that uses it (a mutex); the
// buffer is shared by concurrent Run() calls of a session, which ORT's CUDA EP orders on its one
// compute stream.
class DeviceScratch {
 public:
  DeviceScratch() = default;
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch() {
    for (void* b : buffers_) cudaFree(b);  // cudaFree synchronizes: no kernel still reads them
  }
  // At least `bytes` of device memory (capacity() tells how much).
  // Thread-safe: ORT may call Compute of one node from several threads at once. The device
  // memory itself is shared by those runs; that is safe because ORT's CUDA EP issues a
  // session's kernels on one compute stream, which orders them.
  void* Get(size_t bytes, cudaStream_t stream, const char* what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes > capacity_) {
      cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
      ThrowOnCudaError(cudaStreamIsCapturing(stream, &cap), "cudaStreamIsCapturing");
      if (cap != cudaStreamCaptureStatusNone) {
        throw OpError(std::string(what) + " needs " + std::to_string(bytes) +
                          " bytes of scratch during CUDA graph capture but has " + std::to_string(capacity_) +
                          "; run this shape once without capture first",
                      ORT_EP_FAIL);
      }
      const size_t grown = std::max(bytes, capacity_ + capacity_ / 2);
      void* b = nullptr;
      ThrowOnCudaError(cudaMalloc(&b, grown), "cudaMalloc (scratch)");
      buffers_.push_back(b);  // older buffers stay alive for graphs captured with them
      current_ = b;
      capacity_ = grown;
    }
    return current_;
  }
  size_t capacity() const { return capacity_; }

 private:
  std::mutex mu_;
  std::vector<void*> buffers_;
  void* current_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace pyquant
