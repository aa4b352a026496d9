// CUDA error -> OpError, for the ORT op structs (launchers return cudaError_t).
#pragma once

#include <cuda_runtime.h>

#include <string>

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

}  // namespace pyquant
