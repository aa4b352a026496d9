// MatMulInt4 ORT op struct for the CUDA execution provider: validation (shared), stream, launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/cuda_check.h"
#include "cuda/matmul_int4.h"
#include "cuda/register_cuda.h"

namespace pyquant {

namespace {

template <ONNXTensorElementDataType kType, typename T>
class MatMulInt4Cuda final : public Kernel {
 public:
  explicit MatMulInt4Cuda(const OrtKernelInfo* info) : attrs_(ReadMatMulInt4Attrs(info)) {
    CheckMatMulInt4Constants(info, attrs_, kType);
  }
  void Compute(OrtKernelContext* ctx) override {
    const MatMulInt4Problem p = BindMatMulInt4(ctx, attrs_, kType);
    if (p.m == 0) return;
    ThrowOnCudaError(LaunchMatMulInt4<T>(p, ComputeStream(ctx)), "MatMulInt4 kernel launch");
  }

 private:
  MatMulInt4Attrs attrs_;
};

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
