// LinearFp8 ORT op struct for the CUDA execution provider: validation (shared), scratch for the
// quantized activations, stream, launch. x_scale arrives in host memory (input_on_cpu).
//
// Scratch: a DeviceScratch (cuda_check.h) per node.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/env_knobs.h"
#include "cuda/linear_fp8.h"
#include "cuda/matmul_int4.h"  // CudaForceReferenceKernels
#include "cuda/register_cuda.h"

namespace pyquant {

Fp8Options CudaFp8Options() {
  Fp8Options o;
  if (const char* v = EnvValue("PYQUANT_FP8_SM90_MIN_M")) {
    o.sm90_min_m = o.sm90_min_m_small = o.sm90_min_m_narrow = std::strtoll(v, nullptr, 10);
  }
  o.gemv = EnvChoice("PYQUANT_FP8_GEMV",
                     {"auto",     "mma", "swap", "fused", "fused1", "fused2", "fused3", "fused4", "mmasplit", "staged",
                      "nostaged", "tc",  "tc1",  "tc2",   "tc3",    "tc4",    "tc5",    "notc",   "fused5",   "fused6"},
                     0);
  o.k_split_fill = std::max(1, std::min(8, EnvInt("PYQUANT_FP8_KSPLIT_FILL", 1)));
  o.tc_max_ctas = std::max(0, EnvInt("PYQUANT_FP8_TC_CTAS", 0));
  const int mma_nt = EnvInt("PYQUANT_FP8_MMA_NT", 0);  // "auto" (not a number) -> 0
  o.mma_nt = mma_nt == 1 || mma_nt == 2 || mma_nt == 4 ? mma_nt : 0;
  o.staged_split = CudaStagedSplitLimits();
  o.staged_shape = EnvChoice("PYQUANT_FP8_STAGED_SHAPE", {"auto", "wide", "tall"}, 0);
  o.staged_max_m = EnvInt("PYQUANT_FP8_STAGED_MAX_M", static_cast<int>(kFp8StagedMaxM));
  if (EnvValue("PYQUANT_FP8_SM90_MIN_M") != nullptr) o.staged_max_m = std::min(o.staged_max_m, o.sm90_min_m_narrow - 1);
  o.sm90_variant = EnvChoice("PYQUANT_FP8_SM90_TILE",
                             {"auto", "f128", "f256", "c2", "f256c2", "p128", "p128c2", "p64", "n64", "f192", "f192c2",
                              "c128", "o128", "o256", "o256c2", "op128", "o256s"},
                             0);
  o.sm90_promote = EnvInt("PYQUANT_FP8_SM90_PROMOTE", 0);
  o.gemm_pdl_late = EnvChoice("PYQUANT_FP8_GEMM_PDL", {"auto", "late", "upto512"}, 0) != 2;
  o.sm90_sched = ReadSm90SchedulerTuning("PYQUANT_FP8_SM90", &o.sm90_decomposition_auto);
  return o;
}

namespace {

template <ONNXTensorElementDataType kType, typename T>
class LinearFp8Cuda final : public Kernel {
 public:
  explicit LinearFp8Cuda(const OrtKernelInfo* info)
      : attrs_(ReadLinearFp8Attrs(info)), force_ref_(CudaForceReferenceKernels()), opt_(CudaFp8Options()) {
    CheckLinearFp8Constants(info, attrs_, kType);
    // PDL's early weight loads only from initializers (cuda/pdl.h).
    bool w_constant = false, w_scale_constant = false;
    GetConstantInput(info, kF8W, &w_constant);
    GetConstantInput(info, kF8WScale, &w_scale_constant);
    weights_constant_ = w_constant && w_scale_constant;
    pdl_setting_ = CudaPdlSetting();
  }
  void Compute(OrtKernelContext* ctx) override {
    const LinearFp8Problem p = BindLinearFp8(ctx, attrs_, kType);
    if (p.m == 0) return;
    const cudaStream_t stream = ComputeStream(ctx);
    std::lock_guard<std::mutex> lock(mu_);
    // Scratch: quantized X and row scales, plus the Hopper GEMM's stream-K workspace when that
    // kernel serves this shape (sized here, outside any graph capture on the first run).
    Fp8Workspace ws = Scratch(force_ref_ ? LinearFp8WorkspaceBytes(p) : LinearFp8WorkspaceBytesT<T>(p, opt_), stream);
    const PdlMode pdl = MakePdlMode(pdl_setting_, weights_constant_);
    ThrowOnCudaError(force_ref_ ? LaunchLinearFp8Ref<T>(p, ws, stream) : LaunchLinearFp8<T>(p, ws, stream, opt_, pdl),
                     "LinearFp8 kernel launch");
  }

 private:
  Fp8Workspace Scratch(size_t bytes, cudaStream_t stream) {
    Fp8Workspace ws;
    ws.data = scratch_.Get(bytes, stream, "LinearFp8", &ws.bytes);
    return ws;
  }

  LinearFp8Attrs attrs_;
  bool force_ref_;
  Fp8Options opt_;  // kernel choices, read from the environment at creation
  bool weights_constant_ = false;
  PdlSetting pdl_setting_ = PdlSetting::kOn;
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
