// LinearFp8 ORT op struct for the CUDA execution provider: validation (shared), scratch for the
// quantized activations, stream, launch. x_scale arrives in host memory (input_on_cpu).
//
// Scratch: a DeviceScratch (cuda_check.h) per node.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/linear_fp8.h"
#include "cuda/matmul_int4.h"  // CudaForceReferenceKernels
#include "cuda/register_cuda.h"

namespace pyquant {

int64_t CudaFp8Sm90MinM() {
  const char* v = std::getenv("PYQUANT_FP8_SM90_MIN_M");
  return v != nullptr && *v ? std::strtoll(v, nullptr, 10) : kFp8Sm90MinM;
}

namespace {

template <ONNXTensorElementDataType kType, typename T>
class LinearFp8Cuda final : public Kernel {
 public:
  explicit LinearFp8Cuda(const OrtKernelInfo* info)
      : attrs_(ReadLinearFp8Attrs(info)), force_ref_(CudaForceReferenceKernels()), sm90_min_m_(CudaFp8Sm90MinM()) {
    CheckLinearFp8Constants(info, attrs_, kType);
  }
  void Compute(OrtKernelContext* ctx) override {
    const LinearFp8Problem p = BindLinearFp8(ctx, attrs_, kType);
    if (p.m == 0) return;
    const cudaStream_t stream = ComputeStream(ctx);
    std::lock_guard<std::mutex> lock(mu_);
    // Scratch: quantized X and row scales, plus the Hopper GEMM's stream-K workspace when that
    // kernel serves this shape (sized here, outside any graph capture on the first run).
    Fp8Workspace ws =
        Scratch(force_ref_ ? LinearFp8WorkspaceBytes(p) : LinearFp8WorkspaceBytesT<T>(p, sm90_min_m_), stream);
    ThrowOnCudaError(force_ref_ ? LaunchLinearFp8Ref<T>(p, ws, stream) : LaunchLinearFp8<T>(p, ws, stream, sm90_min_m_),
                     "LinearFp8 kernel launch");
  }
 private:
  Fp8Workspace Scratch(size_t bytes, cudaStream_t stream) {
    Fp8Workspace ws;
    ws.data = scratch_.Get(bytes, stream, "LinearFp8");
    ws.bytes = scratch_.capacity();
    return ws;
  }

  LinearFp8Attrs attrs_;
  bool force_ref_;
  int64_t sm90_min_m_;
  std::mutex mu_;
  DeviceScratch scratch_;
};

template <ONNXTensorElementDataType kType, typename T>
OpDef MakeDef() {
  OpDef d = LinearFp8OpDef(kType, kCudaExecutionProvider);
  d.create = [](const OrtKernelInfo* info, const std::string&) -> std::unique_ptr<Kernel> {
    return std::make_unique<LinearFp8Cuda<kType, T>>(info);
  };
  return d;
}

}  // namespace

void AppendLinearFp8CudaOps(std::vector<OpDef>& defs) {
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, float>());
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, __half>());
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16, __nv_bfloat16>());
}

}  // namespace pyquant
