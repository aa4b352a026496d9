#include "common/custom_op.h"

#include <cstring>

namespace pyquant {

namespace {

struct KernelHandle {
  std::unique_ptr<Kernel> kernel;
  std::string op;
  std::string node;
};

OrtStatus* MakeStatus(OrtErrorCode code, const std::string& op, const std::string& node, const char* what) {
  std::string msg = "pyquant " + op + " node '" + node + "': " + what;
  return Api().CreateStatus(code, msg.c_str());
}

const CustomOp* Self(const OrtCustomOp* op) { return static_cast<const CustomOp*>(op); }

}  // namespace

CustomOp::CustomOp(OpDef def) : OrtCustomOp{}, def_(std::move(def)) {
  std::memset(static_cast<OrtCustomOp*>(this), 0, sizeof(OrtCustomOp));
  version = kOrtApiVersion;
  GetName = [](const OrtCustomOp* op) { return Self(op)->def().name; };
  GetExecutionProviderType = [](const OrtCustomOp* op) { return Self(op)->def().execution_provider; };
  GetInputTypeCount = [](const OrtCustomOp* op) { return Self(op)->def().input_types.size(); };
  GetInputType = [](const OrtCustomOp* op, size_t i) { return Self(op)->def().input_types[i]; };
  GetOutputTypeCount = [](const OrtCustomOp*) -> size_t { return 1; };
  GetOutputType = [](const OrtCustomOp* op, size_t) { return Self(op)->def().output_type; };
  GetInputCharacteristic = [](const OrtCustomOp* op, size_t i) {
    return Self(op)->def().input_optional[i] ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  };
  GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
  GetInputMemoryType = [](const OrtCustomOp* op, size_t i) {
    const auto& on_cpu = Self(op)->def().input_on_cpu;
    return (i < on_cpu.size() && on_cpu[i]) ? OrtMemTypeCPUInput : OrtMemTypeDefault;
  };
  GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
  GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
  GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
  GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
  GetStartVersion = [](const OrtCustomOp*) { return 1; };
  GetEndVersion = [](const OrtCustomOp*) { return 1; };

  CreateKernelV2 = [](const OrtCustomOp* op, const OrtApi*, const OrtKernelInfo* info, void** kernel) -> OrtStatusPtr {
    const OpDef& d = Self(op)->def();
    std::string node = NodeName(info);
    try {
      auto handle = std::make_unique<KernelHandle>();
      handle->kernel = d.create(info, node);
      handle->op = d.name;
      handle->node = node;
      *kernel = handle.release();
      return nullptr;
    } catch (const OpError& e) {
      return MakeStatus(e.code(), d.name, node, e.what());
    } catch (const std::exception& e) {
      return MakeStatus(ORT_FAIL, d.name, node, e.what());
    }
  };
  KernelComputeV2 = [](void* kernel, OrtKernelContext* ctx) -> OrtStatusPtr {
    auto* h = static_cast<KernelHandle*>(kernel);
    try {
      h->kernel->Compute(ctx);
      return nullptr;
    } catch (const OpError& e) {
      return MakeStatus(e.code(), h->op, h->node, e.what());
    } catch (const std::exception& e) {
      return MakeStatus(ORT_FAIL, h->op, h->node, e.what());
    }
  };
  KernelDestroy = [](void* kernel) { delete static_cast<KernelHandle*>(kernel); };
  if (def_.infer_shape) {
    InferOutputShapeFn = [](const OrtCustomOp* op, OrtShapeInferContext* ctx) -> OrtStatusPtr {
      try {
        Self(op)->def().infer_shape(ctx);
        return nullptr;
      } catch (const std::exception& e) {
        return Api().CreateStatus(ORT_INVALID_ARGUMENT, e.what());
      }
    };
  }
}

int64_t InferIntAttr(OrtShapeInferContext* ctx, const char* name) {
  const OrtApi& api = Api();
  int64_t n = -1;
  const OrtOpAttr* attr = nullptr;
  OrtStatus* as = api.ShapeInferContext_GetAttribute(ctx, name, &attr);
  if (as) {
    api.ReleaseStatus(as);
    return -1;
  }
  if (attr == nullptr) return -1;
  size_t written = 0;
  OrtStatus* rs = api.ReadOpAttr(attr, ORT_OP_ATTR_INT, &n, sizeof(n), &written);
  if (rs) {
    api.ReleaseStatus(rs);
    return -1;
  }
  return n;
}

int64_t InferInputDim(OrtShapeInferContext* ctx, size_t input, size_t axis) {
  const OrtApi& api = Api();
  OrtTensorTypeAndShapeInfo* in = nullptr;
  OrtStatus* st = api.ShapeInferContext_GetInputTypeShape(ctx, input, &in);
  if (st) {
    api.ReleaseStatus(st);
    return -1;
  }
  size_t rank = 0;
  int64_t dim = -1;
  st = api.GetDimensionsCount(in, &rank);
  if (!st && axis < rank) {
    std::vector<int64_t> dims(rank);
    st = api.GetDimensions(in, dims.data(), rank);
    if (!st) dim = dims[axis];
  }
  if (st) api.ReleaseStatus(st);
  return dim;
}

// Note: the OrtTensorTypeAndShapeInfo that ShapeInferContext_GetInputTypeShape returns is owned
// by the context in current ORT releases (releasing it is a double free), so it is never released.
void InferOutputLikeX(OrtShapeInferContext* ctx, int64_t n) {
  const OrtApi& api = Api();
  OrtTensorTypeAndShapeInfo* in = nullptr;
  ThrowOnError(api.ShapeInferContext_GetInputTypeShape(ctx, 0, &in));
  ONNXTensorElementDataType type;
  size_t rank = 0;
  OrtStatus* st = api.GetTensorElementType(in, &type);
  if (!st) st = api.GetDimensionsCount(in, &rank);
  std::vector<int64_t> dims(rank);
  std::vector<const char*> sym(rank, nullptr);
  if (!st && rank) st = api.GetDimensions(in, dims.data(), rank);
  if (!st && rank) st = api.GetSymbolicDimensions(in, sym.data(), rank);
  std::vector<std::string> sym_copy(rank);
  for (size_t i = 0; i < rank; ++i) sym_copy[i] = sym[i] ? sym[i] : "";
  ThrowOnError(st);

  OrtTensorTypeAndShapeInfo* out = nullptr;
  ThrowOnError(api.CreateTensorTypeAndShapeInfo(&out));
  st = api.SetTensorElementType(out, type);
  if (!st && rank > 0) {
    dims[rank - 1] = n;
    sym_copy[rank - 1] = "";
    std::vector<const char*> sym_ptrs(rank);
    for (size_t i = 0; i < rank; ++i) sym_ptrs[i] = sym_copy[i].c_str();
    st = api.SetDimensions(out, dims.data(), rank);
    if (!st) st = api.SetSymbolicDimensions(out, sym_ptrs.data(), rank);
  }
  if (!st) st = api.ShapeInferContext_SetOutputTypeShape(ctx, 0, out);
  api.ReleaseTensorTypeAndShapeInfo(out);
  ThrowOnError(st);
}

}  // namespace pyquant
