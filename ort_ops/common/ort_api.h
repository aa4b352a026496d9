// Access to ONNX Runtime's C API, which ORT hands to RegisterCustomOps. We compile against any
// ORT headers >= 1.20 but ask ORT for API version 20 and use nothing newer, so the library loads
// in every onnxruntime from 1.20 on.
#pragma once

#define ORT_API_MANUAL_INIT
#include <onnxruntime_c_api.h>
#undef ORT_API_MANUAL_INIT

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace pyquant {

constexpr uint32_t kOrtApiVersion = 20;

const OrtApi& Api();
void SetApi(const OrtApi* api);

// An error meant for the user: thrown by validation and kernels, caught at the C boundary
// (common/custom_op.cc) and turned into an OrtStatus that names the op and node.
class OpError : public std::runtime_error {
 public:
  explicit OpError(const std::string& msg, OrtErrorCode code = ORT_INVALID_ARGUMENT)
      : std::runtime_error(msg), code_(code) {}
  OrtErrorCode code() const { return code_; }

 private:
  OrtErrorCode code_;
};

// Throws OpError (ORT_FAIL) if an ORT call failed, keeping ORT's message.
void ThrowOnError(OrtStatus* status);

const char* ElementTypeName(ONNXTensorElementDataType t);

// What a kernel needs to know about one input tensor.
struct TensorView {
  const OrtValue* value = nullptr;  // nullptr: optional input absent
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  bool present() const { return value != nullptr; }
  int64_t numel() const;
  std::string ShapeString() const;
};

TensorView GetInput(OrtKernelContext* ctx, size_t index);
void* AllocateOutput(OrtKernelContext* ctx, size_t index, const std::vector<int64_t>& shape);

// Attributes read at kernel creation.
bool TryGetIntAttr(const OrtKernelInfo* info, const char* name, int64_t* out);
std::string NodeName(const OrtKernelInfo* info);
// A constant-initializer input known at kernel creation (is_constant false otherwise).
TensorView GetConstantInput(const OrtKernelInfo* info, size_t index, bool* is_constant);
size_t InputCount(const OrtKernelInfo* info);

std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace pyquant
