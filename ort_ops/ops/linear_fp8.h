// LinearFp8: the parts shared by every execution provider: attributes, input validation,
// output shape, and the activation-quantization rule (docs/ops.md) in one place.
#pragma once

#include <cmath>
#include <string>

#include "common/custom_op.h"
#include "layout/int4_block.h"

namespace pyquant {

constexpr const char* kLinearFp8Name = "LinearFp8";

enum LinearFp8Input : size_t { kF8X = 0, kF8W = 1, kF8WScale = 2, kF8XScale = 3, kF8Bias = 4, kF8NumInputs = 5 };

struct LinearFp8Attrs {
  int64_t block_size = 0;    // 0: per output channel; else weight-scale block along K
  bool weight_only = false;  // attribute weight_only = 1: X is not quantized (docs/ops.md)
};

struct LinearFp8Problem {
  int64_t m = 0, k = 0, n = 0;
  int64_t block_size = 0;          // 0 = per channel
  int64_t n_scale_blocks = 1;      // ceil(K / block_size), or 1
  const void* x = nullptr;         // T [M, K]
  const uint8_t* w = nullptr;      // e4m3fn [N, K]
  const float* w_scale = nullptr;  // float [N, n_scale_blocks]
  bool static_scale = false;       // x_scale given
  bool weight_only = false;        // X used as is (float32 of X), no activation quantization
  float x_scale = 1.0f;            // static scale (host value)
  const void* bias = nullptr;      // T [N] or nullptr
  void* y = nullptr;               // T [M, N]
};

LinearFp8Attrs ReadLinearFp8Attrs(const OrtKernelInfo* info);
void CheckLinearFp8Weights(const LinearFp8Attrs& a, ONNXTensorElementDataType t, const TensorView& w,
                           const TensorView& w_scale, const TensorView& x_scale, const TensorView& bias);
void CheckLinearFp8Constants(const OrtKernelInfo* info, const LinearFp8Attrs& a, ONNXTensorElementDataType t);
// x_scale must be in host memory (the CUDA op asks ORT for it on the CPU).
LinearFp8Problem BindLinearFp8(OrtKernelContext* ctx, const LinearFp8Attrs& a, ONNXTensorElementDataType t);
OpDef LinearFp8OpDef(ONNXTensorElementDataType t, const char* execution_provider);

// The activation-quantization rule of docs/ops.md, for one row: from amax (max |x|, NaN
// ignored) to the multiplier `inv` applied before the saturating cast and the scale `s_x`
// applied to the row's dot products. Shared by the CPU kernel and the CUDA kernels (host and
// device; IEEE float32 division, the library is built without fast-math).
struct Fp8RowScale {
  float inv;
  float s_x;
};
PYQUANT_HD Fp8RowScale DynamicFp8RowScale(float amax) {
  if (amax == 0.0f) return {1.0f, 1.0f};
  return {kFp8E4M3Max / amax, amax / kFp8E4M3Max};
}

}  // namespace pyquant
