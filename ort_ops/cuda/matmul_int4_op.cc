// MatMulInt4 ORT op struct for the CUDA execution provider: validation (shared), stream, launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/matmul_int4.h"
#include "cuda/register_cuda.h"

namespace pyquant {

namespace {

template <ONNXTensorElementDataType kType, typename T>
class MatMulInt4Cuda final : public Kernel {
 public:
  explicit MatMulInt4Cuda(const OrtKernelInfo* info)
      : attrs_(ReadMatMulInt4Attrs(info)), force_ref_(CudaForceReferenceKernels()), tiled_min_m_(CudaInt4TiledMinM()) {
    CheckMatMulInt4Constants(info, attrs_, kType);
  }
  void Compute(OrtKernelContext* ctx) override {
    const MatMulInt4Problem p = BindMatMulInt4(ctx, attrs_, kType);
    if (p.m == 0) return;
    const cudaStream_t stream = ComputeStream(ctx);
    if (force_ref_) {
      ThrowOnCudaError(LaunchMatMulInt4Ref<T>(p, stream), "MatMulInt4 kernel launch");
      return;
    }
    // Split-K scratch of the tiled kernel (M * N floats when used): owned by the node.
    const size_t need = MatMulInt4WorkspaceBytes<T>(p, tiled_min_m_);
    std::lock_guard<std::mutex> lock(mu_);
    Int4Workspace ws;
    if (need) {
      ws.data = scratch_.Get(need, stream, "MatMulInt4");
      ws.bytes = scratch_.capacity();
    }
    ThrowOnCudaError(LaunchMatMulInt4<T>(p, stream, tiled_min_m_, ws), "MatMulInt4 kernel launch");
  }

 private:
  MatMulInt4Attrs attrs_;
  bool force_ref_;
  int64_t tiled_min_m_;
  std::mutex mu_;
  DeviceScratch scratch_;
};

}  // namespace

bool CudaForceReferenceKernels() {
  const char* v = std::getenv("PYQUANT_CUDA_KERNELS");
  return v != nullptr && std::string(v) == "ref";
}

int64_t CudaInt4TiledMinM() {
  const char* v = std::getenv("PYQUANT_INT4_TILED_MIN_M");
  return v != nullptr && *v ? std::strtoll(v, nullptr, 10) : kInt4TiledMinM;
}

namespace {

template <ONNXTensorElementDataType kType, typename T>
OpDef MakeDef() {
  OpDef d = MatMulInt4OpDef(kType, kCudaExecutionProvider);
  d.create = [](const OrtKernelInfo* info, const std::string&) -> std::unique_ptr<Kernel> {
    return std::make_unique<MatMulInt4Cuda<kType, T>>(info);
  };
  return d;
}

}  // namespace

void AppendMatMulInt4CudaOps(std::vector<OpDef>& defs) {
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, float>());
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, __half>());
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16, __nv_bfloat16>());
}

}  // namespace pyquant
