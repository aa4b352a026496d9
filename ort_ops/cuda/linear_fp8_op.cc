// LinearFp8 ORT op struct for the CUDA execution provider: validation (shared), scratch from
// ORT's device allocator, stream, launch. x_scale arrives in host memory (input_on_cpu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/cuda_check.h"
#include "cuda/linear_fp8.h"
#include "cuda/register_cuda.h"

namespace pyquant {

namespace {

template <ONNXTensorElementDataType kType, typename T>
class LinearFp8Cuda final : public Kernel {
 public:
  explicit LinearFp8Cuda(const OrtKernelInfo* info) : attrs_(ReadLinearFp8Attrs(info)) {
    CheckLinearFp8Constants(info, attrs_, kType);
  }
  void Compute(OrtKernelContext* ctx) override {
    const LinearFp8Problem p = BindLinearFp8(ctx, attrs_, kType);
    if (p.m == 0) return;
    Fp8Workspace ws;
    ws.bytes = LinearFp8WorkspaceBytes(p);
    if (ws.bytes) {
      // Scratch from ORT's per-run CUDA allocator: stream-ordered, freed after the run, and
      // compatible with CUDA graph capture.
      OrtMemoryInfo* mem = nullptr;
      ThrowOnError(Api().CreateMemoryInfo("Cuda", OrtDeviceAllocator, CurrentDevice(), OrtMemTypeDefault, &mem));
      OrtStatus* st = Api().KernelContext_GetScratchBuffer(ctx, mem, ws.bytes, &ws.data);
      Api().ReleaseMemoryInfo(mem);
      ThrowOnError(st);
      if (ws.data == nullptr) throw OpError("could not allocate " + std::to_string(ws.bytes) + " bytes of CUDA scratch", ORT_EP_FAIL);
    }
    ThrowOnCudaError(LaunchLinearFp8<T>(p, ws, ComputeStream(ctx)), "LinearFp8 kernel launch");
  }

 private:
  static int CurrentDevice() {
    int dev = 0;
    ThrowOnCudaError(cudaGetDevice(&dev), "cudaGetDevice");
    return dev;
  }
  LinearFp8Attrs attrs_;
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
