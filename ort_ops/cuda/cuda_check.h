// CUDA error -> OpError, for the ORT op structs (launchers return cudaError_t).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/ort_api.h"
#include "cuda/stream_buffers.h"

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

// Device scratch owned by one kernel (node): a StreamBuffers (stream_buffers.h says why one buffer
// per stream, and why a buffer lives as long as the node), whose failures become ORT errors.
// Get() is thread-safe.
class DeviceScratch {
 public:
  // At least `bytes` of device memory for work on `stream`; *capacity (if given) receives its size.
  void* Get(size_t bytes, cudaStream_t stream, const char* what, size_t* capacity = nullptr) {
    const StreamBuffers::Result r = buffers_.Get(stream, bytes);
    if (r.status == StreamBuffers::Status::kCapturing) {
      throw OpError(std::string(what) + " needs " + std::to_string(bytes) +
                        " bytes of scratch during CUDA graph capture but has " + std::to_string(r.capacity) +
                        "; run this shape once without capture first",
                    ORT_EP_FAIL);
    }
    if (r.status == StreamBuffers::Status::kCudaError) ThrowOnCudaError(r.error, "device scratch");
    if (capacity != nullptr) *capacity = r.capacity;
    return r.data;
  }

 private:
  StreamBuffers buffers_;
};

}  // namespace pyquant
