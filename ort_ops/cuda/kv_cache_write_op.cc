// KVCacheWrite ORT op struct for the CUDA execution provider: validation (shared), stream, launch.
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

}  // namespace

void AppendKvCacheWriteCudaOps(std::vector<OpDef>& defs) {
  AppendKvCacheWriteDefs<KvCacheWriteCuda>(defs, kCudaExecutionProvider);
}

}  // namespace pyquant
