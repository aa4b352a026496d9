// MatMulInt4 ORT op struct for the CUDA execution provider: validation (shared), stream, launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/env_knobs.h"
#include "cuda/matmul_int4.h"
#include "cuda/register_cuda.h"

namespace pyquant {

namespace {

template <ONNXTensorElementDataType kType, typename T>
class MatMulInt4Cuda final : public Kernel {
 public:
  explicit MatMulInt4Cuda(const OrtKernelInfo* info)
      : attrs_(ReadMatMulInt4Attrs(info)),
        force_ref_(CudaForceReferenceKernels()),
        tiled_min_m_(CudaInt4TiledMinM()),
        gemv_variant_(CudaInt4GemvVariant()),
        mid_variant_(CudaInt4MidVariant()) {
    CheckMatMulInt4Constants(info, attrs_, kType);
    // The sm90 GEMM's transposed scales / zeros are derived once, so only from constant inputs
    // (initializers); scales fed at run time keep the portable kernels.
    GetConstantInput(info, kI4Scales, &scales_constant_);
    GetConstantInput(info, kI4ZeroPoints, &zp_constant_);  // false also when absent: checked per call
    GetConstantInput(info, kI4B, &b_constant_);
    pdl_setting_ = CudaPdlSetting();
    sm90_.min_m = CudaInt4Sm90MinM();
    sm90_ = CudaInt4Sm90Knobs(sm90_);
    if (sm90_.min_m != kInt4Sm90MinM) sm90_.min_m_large = sm90_.min_m;  // an explicit setting wins
  }
  void Compute(OrtKernelContext* ctx) override {
    const MatMulInt4Problem p = BindMatMulInt4(ctx, attrs_, kType);
    if (p.m == 0) return;
    const cudaStream_t stream = ComputeStream(ctx);
    if (force_ref_) {
      ThrowOnCudaError(LaunchMatMulInt4Ref<T>(p, stream), "MatMulInt4 kernel launch");
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    const Int4Sm90Prepared* sm90 = PreparedSm90(p, stream);
    // Scratch (split-K sums of the tiled kernel, or the sm90 GEMM's stream-K partials): node-owned.
    const size_t need = MatMulInt4WorkspaceBytes<T>(p, tiled_min_m_, sm90);
    Int4Workspace ws;
    if (need) {
      ws.data = scratch_.Get(need, stream, "MatMulInt4", &ws.bytes);
    }
    // PDL's early weight loads only from initializers: a B, scale or zero-point tensor computed by
    // an earlier node may still be being written when this kernel starts.
    const bool weights_constant = b_constant_ && scales_constant_ && (p.zero_points == nullptr || zp_constant_);
    const PdlMode pdl = MakePdlMode(pdl_setting_, weights_constant);
    ThrowOnCudaError(LaunchMatMulInt4<T>(p, stream, tiled_min_m_, ws, sm90, gemv_variant_, pdl, mid_variant_),
                     "MatMulInt4 kernel launch");
  }

 private:
  // The sm90 GEMM's prepared inputs, or nullptr (portable kernels). Prepared on the first call
  // that could use them (never during CUDA graph capture: it synchronizes once), again only if
  // ORT hands us other scale / zero-point buffers. Caller holds mu_.
  const Int4Sm90Prepared* PreparedSm90(const MatMulInt4Problem& p, cudaStream_t stream) {
    if (!scales_constant_ || (p.zero_points != nullptr && !zp_constant_)) return nullptr;
    if (p.m < std::min(sm90_.min_m, sm90_.min_m_large) || !MatMulInt4Sm90Candidate<T>(p)) return nullptr;
    // The shuffled weight copy only from a constant B (made once, like scales_t / zeros_t).
    const bool b_copy = b_constant_;
    if (prepared_for_scales_ != p.scales || prepared_for_zp_ != p.zero_points || (b_copy && prepared_for_b_ != p.b)) {
      cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
      ThrowOnCudaError(cudaStreamIsCapturing(stream, &cap), "cudaStreamIsCapturing");
      if (cap != cudaStreamCaptureStatusNone) return nullptr;
      void* dst = prepared_.Get(MatMulInt4Sm90PreparedBytes<T>(p, sm90_, b_copy), stream, "MatMulInt4 (sm90 scales)");
      ThrowOnCudaError(PrepareMatMulInt4Sm90<T>(p, b_copy, dst, stream, &sm90_, &sm90_usable_),
                       "MatMulInt4 sm90 preparation");
      prepared_for_scales_ = p.scales;
      prepared_for_zp_ = p.zero_points;
      prepared_for_b_ = p.b;
    }
    return sm90_usable_ ? &sm90_ : nullptr;
  }

  MatMulInt4Attrs attrs_;
  bool force_ref_;
  int64_t tiled_min_m_;
  int gemv_variant_;
  int mid_variant_;
  bool scales_constant_ = false;
  bool zp_constant_ = false;
  bool b_constant_ = false;
  PdlSetting pdl_setting_ = PdlSetting::kOn;
  std::mutex mu_;
  DeviceScratch scratch_;
  DeviceScratch prepared_;
  Int4Sm90Prepared sm90_;
  bool sm90_usable_ = false;
  const void* prepared_for_scales_ = nullptr;
  const void* prepared_for_zp_ = nullptr;
  const void* prepared_for_b_ = nullptr;
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

int CudaInt4GemvVariant() {
  const char* v = std::getenv("PYQUANT_INT4_GEMV_VARIANT");
  return v != nullptr && *v ? static_cast<int>(std::strtol(v, nullptr, 10)) : -1;
}

int CudaInt4MidVariant() {
  const char* v = std::getenv("PYQUANT_INT4_MID_VARIANT");
  return v != nullptr && *v ? static_cast<int>(std::strtol(v, nullptr, 10)) : -1;
}

int CudaInt4Sm90Tile() {
  return EnvChoice("PYQUANT_INT4_SM90_TILE", {"auto", "c1", "c2m", "k128", "p128", "p256", "p64", "shuf"}, 0);
}

Int4Sm90Prepared CudaInt4Sm90Knobs(Int4Sm90Prepared base) {
  base.tile_variant = CudaInt4Sm90Tile();
  // The shuffled weight copy: opt-in (it doubles the node's weight memory), or variant 7.
  base.shuffled_copy = EnvInt("PYQUANT_INT4_SHUFFLED_COPY", 0) != 0 || base.tile_variant == 7;
  if (base.tile_variant == 7) base.tile_variant = 0;
  base.sched = ReadSm90SchedulerTuning("PYQUANT_INT4_SM90", &base.decomposition_auto);
  return base;
}

int64_t CudaInt4Sm90MinM() {
  const char* v = std::getenv("PYQUANT_INT4_SM90_MIN_M");
  return v != nullptr && *v ? std::strtoll(v, nullptr, 10) : kInt4Sm90MinM;
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
