#include "ops/linear_fp8.h"

#include <cmath>
#include <string>

namespace pyquant {

LinearFp8Attrs ReadLinearFp8Attrs(const OrtKernelInfo* info) {
  LinearFp8Attrs a;
  int64_t bs = 0;
  if (TryGetIntAttr(info, "block_size", &bs)) a.block_size = bs;
  if (a.block_size != 0 &&
      (a.block_size < 16 || (a.block_size & (a.block_size - 1)) != 0 || a.block_size > (1 << 20))) {
    throw OpError("attribute 'block_size' must be 0 (per channel) or a power of two >= 16, got " +
                  std::to_string(a.block_size));
  }
  int64_t wo = 0;
  if (TryGetIntAttr(info, "weight_only", &wo)) {
    if (wo != 0 && wo != 1) throw OpError("attribute 'weight_only' must be 0 or 1, got " + std::to_string(wo));
    a.weight_only = wo == 1;
  }
  return a;
}

void CheckLinearFp8Weights(const LinearFp8Attrs& a, ONNXTensorElementDataType t, const TensorView& w,
                           const TensorView& w_scale, const TensorView& x_scale, const TensorView& bias) {
  int64_t n = -1, k = -1;
  if (w.present()) {
    if (w.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN) {
      throw OpError(std::string("input 'W' must be float8e4m3fn, got ") + ElementTypeName(w.type));
    }
    if (w.shape.size() != 2 || w.shape[0] <= 0 || w.shape[1] <= 0) {
      throw OpError("input 'W' must have shape [N, K] with N, K > 0, got " + w.ShapeString());
    }
    n = w.shape[0];
    k = w.shape[1];
  }
  if (w_scale.present()) {
    if (w_scale.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) {
      throw OpError(std::string("input 'w_scale' must be float32, got ") + ElementTypeName(w_scale.type));
    }
    if (n > 0) {
      if (a.block_size == 0) {
        if (w_scale.shape != std::vector<int64_t>{n}) {
          throw OpError("input 'w_scale' must have shape [" + std::to_string(n) +
                        "] (per channel, block_size=0), got " + w_scale.ShapeString());
        }
      } else {
        const int64_t nb = (k + a.block_size - 1) / a.block_size;
        if (w_scale.shape != std::vector<int64_t>{n, nb}) {
          throw OpError("input 'w_scale' must have shape [" + std::to_string(n) + ", " + std::to_string(nb) +
                        "] for block_size=" + std::to_string(a.block_size) + ", got " + w_scale.ShapeString());
        }
      }
    }
  }
  if (x_scale.present()) {
    if (a.weight_only) {
      throw OpError("input 'x_scale' must be absent when weight_only=1 (X is not quantized)");
    }
    if (x_scale.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) {
      throw OpError(std::string("input 'x_scale' must be float32, got ") + ElementTypeName(x_scale.type));
    }
    if (x_scale.numel() != 1 || x_scale.shape.size() > 1) {
      throw OpError("input 'x_scale' must be a scalar or shape [1], got " + x_scale.ShapeString());
    }
  }
  if (bias.present()) {
    if (bias.type != t) {
      throw OpError(std::string("input 'bias' must be ") + ElementTypeName(t) + ", got " + ElementTypeName(bias.type));
    }
    if (n > 0 && bias.shape != std::vector<int64_t>{n}) {
      throw OpError("input 'bias' must have shape [" + std::to_string(n) + "], got " + bias.ShapeString());
    }
  }
}

static void CheckStaticScaleValue(float s) {
  if (!(std::isfinite(s) && s > 0.0f)) {
    throw OpError("static 'x_scale' must be finite and > 0, got " + std::to_string(s));
  }
}

void CheckLinearFp8Constants(const OrtKernelInfo* info, const LinearFp8Attrs& a, ONNXTensorElementDataType t) {
  bool c[kF8NumInputs] = {};
  TensorView v[kF8NumInputs];
  for (size_t i = kF8W; i < kF8NumInputs; ++i) v[i] = GetConstantInput(info, i, &c[i]);
  CheckLinearFp8Weights(a, t, v[kF8W], v[kF8WScale], v[kF8XScale], v[kF8Bias]);
  // A constant initializer's data is in host memory for the CPU EP only; the CUDA op asks for
  // x_scale on the host, but constant views at creation may still live on the device, so the
  // value check runs at compute time there.
}

LinearFp8Problem BindLinearFp8(OrtKernelContext* ctx, const LinearFp8Attrs& a, ONNXTensorElementDataType t) {
  const TensorView x = GetInput(ctx, kF8X);
  const TensorView w = GetInput(ctx, kF8W);
  const TensorView ws = GetInput(ctx, kF8WScale);
  const TensorView xs = GetInput(ctx, kF8XScale);
  const TensorView bias = GetInput(ctx, kF8Bias);
  if (!x.present() || !w.present() || !ws.present()) throw OpError("inputs X, W and w_scale are required");
  if (x.type != t)
    throw OpError(std::string("input 'X' must be ") + ElementTypeName(t) + ", got " + ElementTypeName(x.type));
  CheckLinearFp8Weights(a, t, w, ws, xs, bias);
  if (x.shape.empty()) throw OpError("input 'X' must have rank >= 1, got a scalar");
  LinearFp8Problem p;
  p.n = w.shape[0];
  p.k = w.shape[1];
  if (x.shape.back() != p.k) {
    throw OpError("input 'X' has last dim " + std::to_string(x.shape.back()) + " but W has K = " + std::to_string(p.k) +
                  " (X shape " + x.ShapeString() + ", W shape " + w.ShapeString() + ")");
  }
  p.m = x.numel() / p.k;
  p.block_size = a.block_size;
  p.weight_only = a.weight_only;
  p.n_scale_blocks = a.block_size ? (p.k + a.block_size - 1) / a.block_size : 1;
  p.x = x.data;
  p.w = static_cast<const uint8_t*>(w.data);
  p.w_scale = static_cast<const float*>(ws.data);
  if (xs.present()) {
    p.static_scale = true;
    p.x_scale = *static_cast<const float*>(xs.data);
    CheckStaticScaleValue(p.x_scale);
  }
  p.bias = bias.present() ? bias.data : nullptr;
  std::vector<int64_t> out_shape = x.shape;
  out_shape.back() = p.n;
  p.y = AllocateOutput(ctx, 0, out_shape);
  return p;
}

OpDef LinearFp8OpDef(ONNXTensorElementDataType t, const char* execution_provider) {
  OpDef d;
  d.name = kLinearFp8Name;
  d.execution_provider = execution_provider;
  d.input_types = {t, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
                   ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, t};
  d.input_optional = {false, false, false, true, true};
  d.input_on_cpu = {false, false, false, true, false};
  d.output_type = t;
  d.infer_shape = [](OrtShapeInferContext* ctx) { InferOutputLikeX(ctx, InferInputDim(ctx, kF8W, 0)); };
  return d;
}

}  // namespace pyquant
