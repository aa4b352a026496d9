#include "ops/matmul_int4.h"

#include <string>

namespace pyquant {

namespace {

void CheckType(const TensorView& v, ONNXTensorElementDataType want, const char* what) {
  if (v.type != want) {
    throw OpError(std::string("input '") + what + "' must be " + ElementTypeName(want) + ", got " +
                  ElementTypeName(v.type));
  }
}

// Accept [d0, d1] or the flat [d0 * d1] form (ORT's MatMulNBits stores scales flat).
void CheckMatrixOrFlat(const TensorView& v, int64_t d0, int64_t d1, const char* what) {
  const bool matrix = v.shape.size() == 2 && v.shape[0] == d0 && v.shape[1] == d1;
  const bool flat = v.shape.size() == 1 && v.shape[0] == d0 * d1;
  if (!matrix && !flat) {
    throw OpError(std::string("input '") + what + "' must have shape [" + std::to_string(d0) + ", " +
                  std::to_string(d1) + "] (or flat [" + std::to_string(d0 * d1) + "]), got " + v.ShapeString());
  }
}

}  // namespace

MatMulInt4Attrs ReadMatMulInt4Attrs(const OrtKernelInfo* info) {
  MatMulInt4Attrs a;
  if (!TryGetIntAttr(info, "K", &a.k)) throw OpError("missing required int attribute 'K'");
  if (!TryGetIntAttr(info, "N", &a.n)) throw OpError("missing required int attribute 'N'");
  if (!TryGetIntAttr(info, "block_size", &a.block_size)) throw OpError("missing required int attribute 'block_size'");
  int64_t bits = 4;
  if (TryGetIntAttr(info, "bits", &bits) && bits != 4) {
    throw OpError("attribute 'bits' must be 4, got " + std::to_string(bits));
  }
  if (TryGetIntAttr(info, "accuracy_level", &a.accuracy_level) &&
      (a.accuracy_level < 0 || a.accuracy_level > MatMulInt4Attrs::kInt8ActivationLevel)) {
    throw OpError("attribute 'accuracy_level' must be 0..4 (4: int8 activations on the CPU EP), got " +
                  std::to_string(a.accuracy_level));
  }
  if (a.k <= 0) throw OpError("attribute 'K' must be positive, got " + std::to_string(a.k));
  if (a.n <= 0) throw OpError("attribute 'N' must be positive, got " + std::to_string(a.n));
  if (a.k > (int64_t{1} << 31) || a.n > (int64_t{1} << 31)) throw OpError("attributes 'K' and 'N' must be < 2^31");
  if (!IsValidInt4BlockSize(a.block_size)) {
    throw OpError("attribute 'block_size' must be a power of two in [16, 256], got " + std::to_string(a.block_size));
  }
  return a;
}

void CheckMatMulInt4Weights(const MatMulInt4Attrs& a, ONNXTensorElementDataType t, const TensorView& b,
                            const TensorView& scales, const TensorView& zero_points, const TensorView& bias) {
  const int64_t nb = a.n_blocks();
  if (b.present()) {
    CheckType(b, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, "B");
    const std::vector<int64_t> want{a.n, nb, Int4BlockBytes(a.block_size)};
    if (b.shape != want) {
      throw OpError("input 'B' must have shape " + ShapeToString(want) + " for K=" + std::to_string(a.k) + ", N=" +
                    std::to_string(a.n) + ", block_size=" + std::to_string(a.block_size) + ", got " + b.ShapeString());
    }
  }
  if (scales.present()) {
    CheckType(scales, t, "scales");
    CheckMatrixOrFlat(scales, a.n, nb, "scales");
  }
  if (zero_points.present()) {
    CheckType(zero_points, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, "zero_points");
    CheckMatrixOrFlat(zero_points, a.n, Int4ZeroPointRowBytes(a.k, a.block_size), "zero_points");
  }
  if (bias.present()) {
    CheckType(bias, t, "bias");
    if (bias.shape != std::vector<int64_t>{a.n}) {
      throw OpError("input 'bias' must have shape [" + std::to_string(a.n) + "], got " + bias.ShapeString());
    }
  }
}

MatMulInt4Problem BindMatMulInt4(OrtKernelContext* ctx, const MatMulInt4Attrs& a, ONNXTensorElementDataType t) {
  const TensorView x = GetInput(ctx, kI4X);
  const TensorView b = GetInput(ctx, kI4B);
  const TensorView scales = GetInput(ctx, kI4Scales);
  const TensorView zp = GetInput(ctx, kI4ZeroPoints);
  const TensorView bias = GetInput(ctx, kI4Bias);
  if (!x.present() || !b.present() || !scales.present()) throw OpError("inputs X, B and scales are required");
  CheckType(x, t, "X");
  if (x.shape.empty()) throw OpError("input 'X' must have rank >= 1, got a scalar");
  if (x.shape.back() != a.k) {
    throw OpError("input 'X' has last dim " + std::to_string(x.shape.back()) + " but attribute K is " +
                  std::to_string(a.k) + " (X shape " + x.ShapeString() + ")");
  }
  CheckMatMulInt4Weights(a, t, b, scales, zp, bias);
  MatMulInt4Problem p;
  p.attrs = a;
  p.m = x.numel() / a.k;
  std::vector<int64_t> out_shape = x.shape;
  out_shape.back() = a.n;
  p.y = AllocateOutput(ctx, 0, out_shape);
  p.x = x.data;
  p.b = static_cast<const uint8_t*>(b.data);
  p.scales = scales.data;
  p.zero_points = zp.present() ? static_cast<const uint8_t*>(zp.data) : nullptr;
  p.bias = bias.present() ? bias.data : nullptr;
  return p;
}

MatMulInt4Constants CheckMatMulInt4Constants(const OrtKernelInfo* info, const MatMulInt4Attrs& a,
                                             ONNXTensorElementDataType t) {
  MatMulInt4Constants c;
  TensorView* v = c.view;
  for (size_t i = kI4B; i < kI4NumInputs; ++i) v[i] = GetConstantInput(info, i, &c.constant[i]);
  CheckMatMulInt4Weights(a, t, v[kI4B], v[kI4Scales], v[kI4ZeroPoints], v[kI4Bias]);
  return c;
}

OpDef MatMulInt4OpDef(ONNXTensorElementDataType t, const char* execution_provider) {
  OpDef d;
  d.name = kMatMulInt4Name;
  d.execution_provider = execution_provider;
  d.input_types = {t, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, t, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, t};
  d.input_optional = {false, false, false, true, true};
  d.output_type = t;
  d.infer_shape = [](OrtShapeInferContext* ctx) { InferOutputLikeX(ctx, InferIntAttr(ctx, "N")); };
  return d;
}

}  // namespace pyquant
