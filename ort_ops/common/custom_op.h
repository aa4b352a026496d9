// A table-driven OrtCustomOp: one instance per (op name, execution provider, activation type).
// ORT merges instances that share a name into one schema whose type constraints are the union,
// and picks the kernel whose fixed input types match the node, so each kernel is typed.
//
// Every callback into our code passes through the trampolines in custom_op.cc, which catch
// OpError / std::exception and return an OrtStatus naming the op and node: no exception ever
// crosses into ORT.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/ort_api.h"

namespace pyquant {

// State of one node: created once per session, Compute() called per run (possibly concurrently
// from several threads: Compute must not mutate the kernel without its own synchronisation).
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void Compute(OrtKernelContext* ctx) = 0;
};

struct OpDef {
  const char* name = nullptr;
  const char* execution_provider = nullptr;  // nullptr = CPUExecutionProvider
  std::vector<ONNXTensorElementDataType> input_types;
  std::vector<bool> input_optional;
  std::vector<bool> input_on_cpu;  // CUDA ops: inputs that ORT should hand over in host memory
  ONNXTensorElementDataType output_type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  // Validates attributes and constant inputs, then builds the kernel (may throw OpError).
  std::unique_ptr<Kernel> (*create)(const OrtKernelInfo* info, const std::string& node_name) = nullptr;
  // Output type + shape for ORT's graph inference (may throw OpError).
  void (*infer_shape)(OrtShapeInferContext* ctx) = nullptr;
};

class CustomOp : public OrtCustomOp {
 public:
  explicit CustomOp(OpDef def);
  const OpDef& def() const { return def_; }

 private:
  OpDef def_;
};

// Shape-inference helpers. Output = X's type and shape with the last dim replaced by n (-1 =
// unknown); X's symbolic dims are kept. The readers return -1 when the value is unknown.
void InferOutputLikeX(OrtShapeInferContext* ctx, int64_t n);
int64_t InferIntAttr(OrtShapeInferContext* ctx, const char* name);
int64_t InferInputDim(OrtShapeInferContext* ctx, size_t input, size_t axis);

}  // namespace pyquant
