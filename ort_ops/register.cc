// The library's one exported symbol. ORT calls it from SessionOptions.register_custom_ops_library.
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "common/custom_op.h"
#include "cpu/register_cpu.h"
#if PYQUANT_WITH_CUDA
#include "cuda/register_cuda.h"
#endif

namespace {

constexpr const char* kDomain = "pyquant";

// ORT before 1.24 dereferences a null type for an omitted optional input (name "") while building
// the context of a custom op's shape-inference function, and crashes. There we register no
// shape function: ORT still infers the output type from the kernels' type constraints, and the
// shapes are known at run time.
bool OrtHasSafeCustomShapeInference(const char* version) {
  int major = 0, minor = 0;
  if (version == nullptr || std::sscanf(version, "%d.%d", &major, &minor) != 2) return false;
  return major > 1 || (major == 1 && minor >= 24);
}

// Op definitions live for the life of the process: ORT keeps pointers to them in every session
// that registered the library.
std::vector<std::unique_ptr<pyquant::CustomOp>>& AllOps(bool shape_inference) {
  static std::vector<std::unique_ptr<pyquant::CustomOp>> ops = [shape_inference] {
    std::vector<std::unique_ptr<pyquant::CustomOp>> v;
    std::vector<pyquant::OpDef> defs = pyquant::CpuOpTable();
#if PYQUANT_WITH_CUDA
    for (auto& d : pyquant::CudaOpTable()) defs.push_back(std::move(d));
#endif
    for (auto& d : defs) {
      if (!shape_inference) d.infer_shape = nullptr;
      v.push_back(std::make_unique<pyquant::CustomOp>(std::move(d)));
    }
    return v;
  }();
  return ops;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  const OrtApi* api = api_base->GetApi(pyquant::kOrtApiVersion);
  if (api == nullptr) {
    // ORT older than 1.20: report through the oldest API table, which every ORT has.
    const OrtApi* old = api_base->GetApi(1);
    return old ? old->CreateStatus(ORT_FAIL, "pyquant ops need onnxruntime >= 1.20") : nullptr;
  }
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  pyquant::SetApi(api);
  OrtCustomOpDomain* domain = nullptr;
  if (OrtStatus* st = api->CreateCustomOpDomain(kDomain, &domain)) return st;
  try {
    for (auto& op : AllOps(OrtHasSafeCustomShapeInference(api_base->GetVersionString()))) {
      if (OrtStatus* st = api->CustomOpDomain_Add(domain, op.get())) return st;
    }
  } catch (const std::exception& e) {
    return api->CreateStatus(ORT_FAIL, e.what());
  }
  // The domain must outlive every session created from these options; ORT does not take
  // ownership, so it is intentionally kept until process exit.
  return api->AddCustomOpDomain(options, domain);
}
