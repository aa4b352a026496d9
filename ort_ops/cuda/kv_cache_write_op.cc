// KVCacheWrite ORT op struct for the CUDA execution provider: validation (shared), stream, launch.
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/kv_cache_write.h"
#include "cuda/register_cuda.h"

namespace pyquant {

namespace {

class KvCacheWriteCuda final : public Kernel {
 public:
  explicit KvCacheWriteCuda(ONNXTensorElementDataType t) : type_(t) {}

  void Compute(OrtKernelContext* ctx) override {
    const KvCacheWriteProblem p = BindKvCacheWrite(ctx, type_);
    if (p.rows > kKvCacheWriteMaxRows) {
      throw OpError("batch * heads = " + std::to_string(p.rows) + " exceeds the CUDA kernel's " +
                    std::to_string(kKvCacheWriteMaxRows) + " (its grid's y dimension)");
    }
    ThrowOnCudaError(LaunchKvCacheWrite(p, ComputeStream(ctx)), "KVCacheWrite");
  }

 private:
  ONNXTensorElementDataType type_;
};

template <ONNXTensorElementDataType kType>
std::unique_ptr<Kernel> CreateKvCacheWriteCuda(const OrtKernelInfo*, const std::string&) {
  return std::make_unique<KvCacheWriteCuda>(kType);
}

template <ONNXTensorElementDataType kType>
OpDef KvCacheWriteCudaDef() {
  OpDef d = KvCacheWriteOpDef(kType, kCudaExecutionProvider);
  d.create = CreateKvCacheWriteCuda<kType>;
  return d;
}

}  // namespace

void AppendKvCacheWriteCudaOps(std::vector<OpDef>& defs) {
  defs.push_back(KvCacheWriteCudaDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT>());
  defs.push_back(KvCacheWriteCudaDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16>());
  defs.push_back(KvCacheWriteCudaDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16>());
}

}  // namespace pyquant
