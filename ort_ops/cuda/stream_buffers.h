// One growable device buffer per (device, CUDA stream): the mechanism behind every op's scratch
// (DeviceScratch, cuda_check.h, one per node) and the staged kernels' split buffers (staged_split.cc,
// one per process).
//
// Why per stream: concurrent Run() calls of one session may be issued on different streams; a
// buffer shared between them was overwritten by one run's activation quantization while another
// run's GEMM still read it (8 threads x 2 sessions gave wrong outputs on an H100:
// bench/results/2026-11-22-h100-cuda-tests.log, test_cuda_reliability). Work on one stream is
// ordered, so launches that share a stream may share its buffer. Keyed by device too: the legacy
// default stream has one handle on every device.
//
// Why never freed before the owner: a CUDA graph captured with a buffer keeps using that buffer,
// so growing allocates a new one and keeps the old. Growing happens only outside capture: inside
// it cudaMalloc would be recorded into the graph's lifetime rules, and ORT's per-run scratch
// allocator failed there (onnxruntime-gpu 1.31, BFCArena "Failed to allocate"). ORT runs a graph's
// first run uncaptured, which grows the buffer for that shape.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <vector>

namespace pyquant {

class StreamBuffers {
 public:
  enum class Status {
    kOk,
    kCapturing,  // the buffer is too small and the stream is capturing: nothing was allocated
    kCudaError,  // cudaGetDevice / cudaStreamIsCapturing / cudaMalloc / cudaMemsetAsync failed
  };
  struct Result {
    void* data = nullptr;
    size_t capacity = 0;  // bytes of `data`
    Status status = Status::kOk;
    cudaError_t error = cudaSuccess;  // with kCudaError
  };

  // zero_new: a newly allocated buffer is zeroed on the stream that asked for it (the split's
  // arrival counters must start at 0).
  explicit StreamBuffers(bool zero_new = false) : zero_new_(zero_new) {}
  StreamBuffers(const StreamBuffers&) = delete;
  StreamBuffers& operator=(const StreamBuffers&) = delete;
  ~StreamBuffers() {
    for (void* b : all_) cudaFree(b);  // cudaFree synchronizes: no kernel still reads them
  }

  // At least `bytes` of device memory for work on `stream` (current device). Grows by at least
  // half the old size, so that a sequence of rising shapes allocates O(log) times. Thread-safe.
  Result Get(cudaStream_t stream, size_t bytes) {
    Result r;
    int device = 0;
    if ((r.error = cudaGetDevice(&device)) != cudaSuccess) return Failed(r);
    std::lock_guard<std::mutex> lock(mu_);
    Entry* e = nullptr;
    for (Entry& x : entries_) {  // a handful of streams at most: a linear search is enough
      if (x.device == device && x.stream == stream) e = &x;
    }
    if (e == nullptr) {
      entries_.push_back(Entry{device, stream, nullptr, 0});
      e = &entries_.back();
    }
    if (bytes > e->capacity) {
      cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
      if ((r.error = cudaStreamIsCapturing(stream, &cap)) != cudaSuccess) return Failed(r);
      if (cap != cudaStreamCaptureStatusNone) {
        r.status = Status::kCapturing;
        r.capacity = e->capacity;
        return r;
      }
      const size_t grown = std::max(bytes, e->capacity + e->capacity / 2);
      void* b = nullptr;
      if ((r.error = cudaMalloc(&b, grown)) != cudaSuccess) return Failed(r);
      all_.push_back(b);  // older buffers stay alive for graphs captured with them
      if (zero_new_ && (r.error = cudaMemsetAsync(b, 0, grown, stream)) != cudaSuccess) return Failed(r);
      e->data = b;
      e->capacity = grown;
    }
    r.data = e->data;
    r.capacity = e->capacity;
    return r;
  }

 private:
  static Result Failed(Result r) {
    (void)cudaGetLastError();  // clear the sticky-free error so that it does not surface elsewhere
    r.status = Status::kCudaError;
    return r;
  }
  struct Entry {
    int device;
    cudaStream_t stream;
    void* data;
    size_t capacity;
  };
  const bool zero_new_;
  std::mutex mu_;
  std::vector<void*> all_;
  std::vector<Entry> entries_;
};

}  // namespace pyquant
