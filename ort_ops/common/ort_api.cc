#include "common/ort_api.h"

#include <sstream>

namespace pyquant {

namespace {
const OrtApi* g_api = nullptr;
}

const OrtApi& Api() { return *g_api; }
void SetApi(const OrtApi* api) { g_api = api; }

void ThrowOnError(OrtStatus* status) {
  if (status == nullptr) return;
  std::string msg = Api().GetErrorMessage(status);
  Api().ReleaseStatus(status);
  throw OpError(msg, ORT_FAIL);
}

const char* ElementTypeName(ONNXTensorElementDataType t) {
  switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return "float32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return "float16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return "bfloat16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return "uint8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return "int8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN: return "float8e4m3fn";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return "float64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return "int32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return "int64";
    default: return "an unsupported type";
  }
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string TensorView::ShapeString() const { return ShapeToString(shape); }

static TensorView Describe(const OrtValue* v) {
  TensorView t;
  t.value = v;
  if (v == nullptr) return t;
  const OrtApi& api = Api();
  OrtTensorTypeAndShapeInfo* info = nullptr;
  ThrowOnError(api.GetTensorTypeAndShape(v, &info));
  size_t rank = 0;
  OrtStatus* st = api.GetTensorElementType(info, &t.type);
  if (!st) st = api.GetDimensionsCount(info, &rank);
  if (!st) {
    t.shape.resize(rank);
    st = api.GetDimensions(info, t.shape.data(), rank);
  }
  api.ReleaseTensorTypeAndShapeInfo(info);
  ThrowOnError(st);
  void* data = nullptr;
  ThrowOnError(api.GetTensorMutableData(const_cast<OrtValue*>(v), &data));
  t.data = data;
  return t;
}

TensorView GetInput(OrtKernelContext* ctx, size_t index) {
  size_t count = 0;
  ThrowOnError(Api().KernelContext_GetInputCount(ctx, &count));
  if (index >= count) return TensorView{};
  const OrtValue* v = nullptr;
  ThrowOnError(Api().KernelContext_GetInput(ctx, index, &v));
  return Describe(v);
}

void* AllocateOutput(OrtKernelContext* ctx, size_t index, const std::vector<int64_t>& shape) {
  OrtValue* out = nullptr;
  ThrowOnError(Api().KernelContext_GetOutput(ctx, index, shape.data(), shape.size(), &out));
  void* data = nullptr;
  ThrowOnError(Api().GetTensorMutableData(out, &data));
  return data;
}

bool TryGetIntAttr(const OrtKernelInfo* info, const char* name, int64_t* out) {
  OrtStatus* st = Api().KernelInfoGetAttribute_int64(info, name, out);
  if (st == nullptr) return true;
  Api().ReleaseStatus(st);
  return false;
}

std::string NodeName(const OrtKernelInfo* info) {
  size_t size = 0;
  OrtStatus* st = Api().KernelInfo_GetNodeName(info, nullptr, &size);
  if (st) {
    Api().ReleaseStatus(st);
    return "?";
  }
  std::string name(size, '\0');
  st = Api().KernelInfo_GetNodeName(info, name.data(), &size);
  if (st) {
    Api().ReleaseStatus(st);
    return "?";
  }
  if (!name.empty() && name.back() == '\0') name.pop_back();
  return name;
}

size_t InputCount(const OrtKernelInfo* info) {
  size_t n = 0;
  ThrowOnError(Api().KernelInfo_GetInputCount(info, &n));
  return n;
}

TensorView GetConstantInput(const OrtKernelInfo* info, size_t index, bool* is_constant) {
  *is_constant = false;
  if (index >= InputCount(info)) return TensorView{};
  int constant = 0;
  const OrtValue* v = nullptr;
  OrtStatus* st = Api().KernelInfoGetConstantInput_tensor(info, index, &constant, &v);
  if (st) {
    Api().ReleaseStatus(st);
    return TensorView{};
  }
  if (!constant || v == nullptr) return TensorView{};
  *is_constant = true;
  return Describe(v);
}

}  // namespace pyquant
