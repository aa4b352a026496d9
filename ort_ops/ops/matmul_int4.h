// MatMulInt4: the parts shared by every execution provider: attributes, input validation,
// output shape. Kernels (cpu/, cuda/) receive a validated MatMulInt4Problem and raw pointers.
#pragma once

#include <string>

#include "common/custom_op.h"
#include "layout/int4_block.h"

namespace pyquant {

constexpr const char* kMatMulInt4Name = "MatMulInt4";

// Input slots (docs/ops.md).
enum MatMulInt4Input : size_t { kI4X = 0, kI4B = 1, kI4Scales = 2, kI4ZeroPoints = 3, kI4Bias = 4, kI4NumInputs = 5 };

struct MatMulInt4Attrs {
  int64_t k = 0;           // input features
  int64_t n = 0;           // output features
  int64_t block_size = 0;  // power of two, 16..256
  // 0..4 as ORT's MatMulNBits; 4: X quantized to int8 per row and block on the CPU EP (docs/ops.md,
  // "Int8 activations"); 0-3, and every level on the CUDA EP: X used as float32.
  int64_t accuracy_level = 0;
  int64_t n_blocks() const { return Int4NumBlocks(k, block_size); }
  bool int8_activations() const { return accuracy_level == kInt8ActivationLevel; }
  static constexpr int64_t kInt8ActivationLevel = 4;
};

// One call: shapes and pointers, all validated.
struct MatMulInt4Problem {
  int64_t m = 0;  // product of X's leading dims
  MatMulInt4Attrs attrs;
  const void* x = nullptr;               // T [M, K]
  const uint8_t* b = nullptr;            // uint8 [N, n_blocks, block_size/2]
  const void* scales = nullptr;          // T [N, n_blocks]
  const uint8_t* zero_points = nullptr;  // uint8 [N, ceil(n_blocks/2)] or nullptr (= 8)
  const void* bias = nullptr;            // T [N] or nullptr
  void* y = nullptr;                     // T [M, N]
};

// Reads and checks the attributes (throws OpError naming the problem).
MatMulInt4Attrs ReadMatMulInt4Attrs(const OrtKernelInfo* info);

// Checks inputs 1..4 (types and shapes) against the attributes. `t` is X's element type. Used
// both at kernel creation on constant initializers and at run time.
void CheckMatMulInt4Weights(const MatMulInt4Attrs& a, ONNXTensorElementDataType t, const TensorView& b,
                            const TensorView& scales, const TensorView& zero_points, const TensorView& bias);

// Validates all inputs of this run, allocates Y and fills the problem.
MatMulInt4Problem BindMatMulInt4(OrtKernelContext* ctx, const MatMulInt4Attrs& a, ONNXTensorElementDataType t);

// The inputs B .. bias at kernel creation: view[i] set (present) where input i is a constant
// initializer.
struct MatMulInt4Constants {
  TensorView view[kI4NumInputs];
  bool constant[kI4NumInputs] = {};
};
// Creation-time checks on whatever inputs are constant initializers; returns them (for kernels that
// prepare a copy of the weights).
MatMulInt4Constants CheckMatMulInt4Constants(const OrtKernelInfo* info, const MatMulInt4Attrs& a,
                                             ONNXTensorElementDataType t);

OpDef MatMulInt4OpDef(ONNXTensorElementDataType t, const char* execution_provider);

}  // namespace pyquant
