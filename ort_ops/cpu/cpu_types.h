// ONNX element type <-> C++ storage type for the CPU kernels, and X -> float32 conversion.
#pragma once

#include <vector>

#include "common/dtypes.h"
#include "common/ort_api.h"
#include "cpu/parallel.h"

namespace pyquant {

template <ONNXTensorElementDataType kType>
struct CpuType;
template <>
struct CpuType<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT> {
  using type = float;
};
template <>
struct CpuType<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16> {
  using type = Half;
};
template <>
struct CpuType<ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16> {
  using type = BFloat16;
};

// Returns X as float32 [M, K]: X itself when T is float, else a converted copy in `storage`.
template <typename T>
const float* AsFloat(OrtKernelContext* ctx, const void* x, int64_t count, std::vector<float>& storage) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<const float*>(x);
  } else {
    storage.resize(static_cast<size_t>(count));
    const T* src = static_cast<const T*>(x);
    constexpr int64_t kChunk = 1 << 16;
    const int64_t chunks = (count + kChunk - 1) / kChunk;
    ParallelFor(ctx, static_cast<size_t>(chunks), [&](size_t c) {
      const int64_t lo = static_cast<int64_t>(c) * kChunk;
      const int64_t hi = std::min(count, lo + kChunk);
      for (int64_t i = lo; i < hi; ++i) storage[i] = ToFloat(src[i]);
    });
    return storage.data();
  }
}

}  // namespace pyquant
