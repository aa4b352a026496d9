// The library's one exported symbol. ORT calls it from SessionOptions.register_custom_ops_library.
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

// Op definitions live for the life of the process: ORT keeps pointers to them in every session
// that registered the library.
std::vector<std::unique_ptr<pyquant::CustomOp>>& AllOps() {
  static std::vector<std::unique_ptr<pyquant::CustomOp>> ops = [] {
    std::vector<std::unique_ptr<pyquant::CustomOp>> v;
    std::vector<pyquant::OpDef> defs = pyquant::CpuOpTable();
#if PYQUANT_WITH_CUDA
    for (auto& d : pyquant::CudaOpTable()) defs.push_back(std::move(d));
#endif
    for (auto& d : defs) v.push_back(std::make_unique<pyquant::CustomOp>(std::move(d)));
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
    for (auto& op : AllOps()) {
      if (OrtStatus* st = api->CustomOpDomain_Add(domain, op.get())) return st;
    }
  } catch (const std::exception& e) {
    return api->CreateStatus(ORT_FAIL, e.what());
  }
  // The domain must outlive every session created from these options; ORT does not take
  // ownership, so it is intentionally kept until process exit.
  return api->AddCustomOpDomain(options, domain);
}
