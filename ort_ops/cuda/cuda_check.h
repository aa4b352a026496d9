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

// Device scratch owned by one kernel (node), one buffer per CUDA stream: grown with cudaMalloc
// outside CUDA-graph capture, never freed before the kernel, because a captured graph keeps using
// the buffer it was captured with (ORT's per-run scratch allocator failed inside ORT's CUDA-graph
// capture: onnxruntime-gpu 1.31, BFCArena "Failed to allocate"). ORT runs a graph's first run
// uncaptured, which grows the buffer for that shape.
//
// Why per stream: concurrent Run() calls of one session may be issued on different streams; a
// buffer shared between them was overwritten by one run's activation quantization while another
// run's GEMM still read it (8 threads x 2 sessions gave wrong outputs on an H100:
// bench/results/2026-11-22-h100-cuda-tests.log, test_cuda_reliability). Work on one stream is
// ordered, so runs that share a stream may share its buffer. Get() is thread-safe.
class DeviceScratch {
 public:
  DeviceScratch() = default;
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch() {
    for (void* b : buffers_) cudaFree(b);  // cudaFree synchronizes: no kernel still reads them
  }
  // At least `bytes` of device memory for work on `stream`; *capacity (if given) receives its size.
  void* Get(size_t bytes, cudaStream_t stream, const char* what, size_t* capacity = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    Entry* e = nullptr;
    for (Entry& x : entries_) {
      if (x.stream == stream) e = &x;
    }
    if (e == nullptr) {
      entries_.push_back(Entry{stream, nullptr, 0});
      e = &entries_.back();
    }
    if (bytes > e->capacity) {
      cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
      ThrowOnCudaError(cudaStreamIsCapturing(stream, &cap), "cudaStreamIsCapturing");
      if (cap != cudaStreamCaptureStatusNone) {
        throw OpError(std::string(what) + " needs " + std::to_string(bytes) +
                          " bytes of scratch during CUDA graph capture but has " + std::to_string(e->capacity) +
                          "; run this shape once without capture first",
                      ORT_EP_FAIL);
      }
      const size_t grown = std::max(bytes, e->capacity + e->capacity / 2);
      void* b = nullptr;
      ThrowOnCudaError(cudaMalloc(&b, grown), "cudaMalloc (scratch)");
      buffers_.push_back(b);  // older buffers stay alive for graphs captured with them
      e->data = b;
      e->capacity = grown;
    }
    if (capacity != nullptr) *capacity = e->capacity;
    return e->data;
  }

 private:
  struct Entry {
    cudaStream_t stream;
    void* data;
    size_t capacity;
  };
  std::mutex mu_;
  std::vector<void*> buffers_;
  std::vector<Entry> entries_;  // a handful of streams at most: a linear search is enough
};

}  // namespace pyquant
