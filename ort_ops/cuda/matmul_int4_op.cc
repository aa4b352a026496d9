// MatMulInt4 ORT op struct for the CUDA execution provider: validation (shared), stream, launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "cuda/cuda_check.h"
#include "cuda/device_info.h"
#include "cuda/env_knobs.h"
#include "cuda/matmul_int4.h"
#include "cuda/register_cuda.h"

namespace pyquant {

namespace {

// Device buffers rewritten in the shuffled order, with the number of nodes that read them: the
// first node rewrites, the last one's destruction forgets the address (ORT frees initializers
// with the session, and a later session may get the same address for a row-major B).
std::mutex& ShuffledMutex() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<const void*, int>& ShuffledBuffers() {
  static auto* m = new std::unordered_map<const void*, int>();
  return *m;
}
// Registers one more reader of b; true when b is not shuffled yet (the caller rewrites it, under
// no lock: kernel creation is sequential within a session, and B belongs to one session).
bool AcquireShuffled(const void* b) {
  std::lock_guard<std::mutex> lock(ShuffledMutex());
  return ShuffledBuffers()[b]++ == 0;
}
void ReleaseShuffled(const void* b) {
  std::lock_guard<std::mutex> lock(ShuffledMutex());
  auto it = ShuffledBuffers().find(b);
  if (it != ShuffledBuffers().end() && --it->second <= 0) ShuffledBuffers().erase(it);
}

template <ONNXTensorElementDataType kType, typename T>
class MatMulInt4Cuda final : public Kernel {
 public:
  explicit MatMulInt4Cuda(const OrtKernelInfo* info)
      : attrs_(ReadMatMulInt4Attrs(info)),
        force_ref_(CudaForceReferenceKernels()),
        tiled_min_m_(CudaInt4TiledMinM()),
        gemv_variant_(CudaInt4GemvVariant()),
        mid_variant_(CudaInt4MidVariant()),
        mid_rows_(CudaInt4MidRows()),
        staged_split_(CudaStagedSplitLimits()),
        staged_max_m_(EnvInt("PYQUANT_INT4_STAGED_MAX_M", 0)) {
    const MatMulInt4Constants constants = CheckMatMulInt4Constants(info, attrs_, kType);
    // The sm90 GEMM's transposed scales / zeros are derived once, so only from constant inputs
    // (initializers); scales fed at run time keep the portable kernels.
    scales_constant_ = constants.constant[kI4Scales];
    zp_constant_ = constants.constant[kI4ZeroPoints];  // false also when absent: checked per call
    b_constant_ = constants.constant[kI4B];
    pdl_setting_ = CudaPdlSetting();
    sm90_.min_m = CudaInt4Sm90MinM();
    sm90_ = CudaInt4Sm90Knobs(sm90_);
    sm90_.narrow_rules = mid_variant_ != kInt4MidNoKSplit;  // "nosplit": the GEMM from its own min M
    // An explicit PYQUANT_INT4_SM90_MIN_M wins over the size rules (also when it names the default, 49);
    // it or PYQUANT_INT4_TILED_MIN_M pins the path, so the short-row mid rule is off too.
    const bool min_m_set = EnvValue("PYQUANT_INT4_SM90_MIN_M") != nullptr;
    if (min_m_set) sm90_.min_m_large = sm90_.min_m_shuffled_wide = sm90_.min_m_shuffled_square = sm90_.min_m;
    sm90_.mid_rows_rule = !min_m_set && EnvValue("PYQUANT_INT4_TILED_MIN_M") == nullptr;
    sm90_.shuf.variant = EnvInt("PYQUANT_INT4_SHUF_VARIANT", -1);
    sm90_.shuf.wide_fill = EnvInt("PYQUANT_INT4_WIDE_FILL", kInt4ShuffledWideFill);
    sm90_.shuf.x_ahead = EnvInt("PYQUANT_INT4_SHUF_XAHEAD", -1);
    sm90_.shuf.piece_paired = EnvInt("PYQUANT_INT4_PIECE_PAIRED", 1) != 0;
    // PYQUANT_INT4_SHUFFLE: 0 = never; 1 (default) = Int4ShuffleByDefault layers (matmul_int4.h);
    // all = every layer the order tiles; require = all, and fail session creation where it cannot.
    const int shuffle = EnvChoice("PYQUANT_INT4_SHUFFLE", {"0", "1", "all", "require"}, 1);
    if (shuffle != 0 && !force_ref_ &&
        (shuffle >= 2 || Int4ShuffleByDefault(attrs_.n, attrs_.k, CurrentDeviceSmCount()))) {
      const std::string why = ShuffleInPlace(constants);
      if (!why.empty() && shuffle == 3) {
        throw OpError("MatMulInt4 node '" + NodeName(info) + "': PYQUANT_INT4_SHUFFLE=require, but B stays " +
                      "row-major: " + why);
      }
    }
  }
  ~MatMulInt4Cuda() override {
    if (in_place_b_ != nullptr) ReleaseShuffled(in_place_b_);
    if (in_place_prepared_ != nullptr) cudaFree(in_place_prepared_);
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
    if (in_place_b_ != nullptr && p.b != in_place_b_) {
      throw OpError("MatMulInt4: B was rewritten in the shuffled order at session creation, but this run " +
                        std::string("binds another B buffer (set PYQUANT_INT4_SHUFFLE=0 for such sessions)"),
                    ORT_EP_FAIL);
    }
    const Int4Sm90Prepared* sm90 = in_place_b_ != nullptr ? InPlaceSm90(p) : PreparedSm90(p, stream);
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
    ThrowOnCudaError(LaunchMatMulInt4<T>(p, stream, tiled_min_m_, ws, sm90, gemv_variant_, pdl, mid_variant_, mid_rows_,
                                         staged_split_, staged_max_m_),
                     "MatMulInt4 kernel launch");
  }

 private:
  // Rewrites a constant B in the shuffled order (layout/int4_shuffled.h) in place, once, and
  // prepares the Hopper GEMM's scales; afterwards every call of this node runs kernels that read
  // that order. Why in place: the order is worth 7-25 % on the Hopper GEMM, and a second copy
  // would double the node's GPU memory (docs/ops.md "GPU weight layout"). Returns "" when done,
  // else why not (then nothing changed and the node reads B as stored).
  //
  // Conditions: fp16 / bf16; a build with the sm_90a kernels on a compute-capability-9.0 GPU;
  // B, scales and zero points constant initializers already in device memory; N % 128 == 0,
  // K % 64 == 0, block_size 64 / 128 / 256. B is shared safely between nodes (a registry counts
  // the nodes that read a shuffled buffer, so it is rewritten once).
  std::string ShuffleInPlace(const MatMulInt4Constants& constants) {
    if constexpr (std::is_same<T, float>::value) {
      return "float32 activations";
    } else {
      if (!b_constant_ || !scales_constant_) return "B or scales are not constant initializers";
      const TensorView& b = constants.view[kI4B];
      const TensorView& scales = constants.view[kI4Scales];
      // Zero points fed at run time: the GEMM's prepared zeros would not match them, so Compute
      // then keeps to the shuffled mma kernels, which read scales and zero points as given.
      const TensorView& zp = constants.view[kI4ZeroPoints];
      if (Int4ShuffledWeightBytes(attrs_.n, attrs_.k) == 0) return "N % 128 != 0 or K % 64 != 0";
      if (b.data == nullptr || scales.data == nullptr) return "B or scales not readable at kernel creation";
      cudaPointerAttributes attr{};
      if (cudaPointerGetAttributes(&attr, b.data) != cudaSuccess || attr.type != cudaMemoryTypeDevice) {
        cudaGetLastError();
        return "B is not in device memory at kernel creation";
      }
      int prev = 0;
      ThrowOnCudaError(cudaGetDevice(&prev), "cudaGetDevice");
      ThrowOnCudaError(cudaSetDevice(attr.device), "cudaSetDevice");
      std::string why;
      try {
        why = ShuffleOnDevice(b.data, scales.data, zp.present() ? zp.data : nullptr);
      } catch (...) {
        cudaSetDevice(prev);
        throw;
      }
      ThrowOnCudaError(cudaSetDevice(prev), "cudaSetDevice");
      return why;
    }
  }

  // ShuffleInPlace on the device that holds B (current).
  std::string ShuffleOnDevice(const void* b, const void* scales, const void* zp) {
    MatMulInt4Problem p;
    p.attrs = attrs_;
    p.m = 0;
    p.b = static_cast<const uint8_t*>(b);
    p.scales = scales;
    p.zero_points = static_cast<const uint8_t*>(zp);
    if (!MatMulInt4Sm90Candidate<T>(p)) return "no Hopper GEMM here (build, GPU, or block size)";
    const int64_t row_bytes = Int4RowBytes(attrs_.k, attrs_.block_size);
    cudaStream_t st = nullptr;
    ThrowOnCudaError(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    void* tmp = nullptr;
    auto cleanup = [&] {
      if (tmp != nullptr) cudaFree(tmp);
      cudaStreamDestroy(st);
    };
    try {
      // The Hopper GEMM's transposed scales: node-owned, like the run-time preparation.
      const size_t prep_bytes = MatMulInt4Sm90PreparedBytes<T>(p, sm90_, false);
      ThrowOnCudaError(cudaMalloc(&in_place_prepared_, prep_bytes), "cudaMalloc (MatMulInt4 sm90 scales)");
      bool usable = false;
      Int4Sm90Prepared prepared = sm90_;
      ThrowOnCudaError(PrepareMatMulInt4Sm90<T>(p, false, in_place_prepared_, st, &prepared, &usable),
                       "MatMulInt4 sm90 preparation");
      if (AcquireShuffled(b)) {  // first node on this B: rewrite it (transient copy of the codes)
        const size_t bytes = static_cast<size_t>(attrs_.n * row_bytes);
        ThrowOnCudaError(cudaMalloc(&tmp, bytes), "cudaMalloc (MatMulInt4 weight rewrite)");
        ThrowOnCudaError(cudaMemcpyAsync(tmp, b, bytes, cudaMemcpyDeviceToDevice, st), "cudaMemcpyAsync");
        ThrowOnCudaError(ShuffleInt4Weights(static_cast<const uint8_t*>(tmp), row_bytes, attrs_.n, attrs_.k,
                                            const_cast<void*>(b), st),
                         "MatMulInt4 weight rewrite");
        ThrowOnCudaError(cudaStreamSynchronize(st), "cudaStreamSynchronize");
      }
      in_place_b_ = b;
      in_place_scales_ = scales;
      in_place_zp_ = zp;
      sm90_.scales_t = usable ? prepared.scales_t : nullptr;  // else no GEMM: the shuffled mma kernel
      sm90_.zeros_t = usable ? prepared.zeros_t : nullptr;
      sm90_.b_shuffled = b;
      sm90_.b_in_place = true;
    } catch (...) {
      cleanup();
      throw;
    }
    cleanup();
    return "";
  }

  // The dispatch state of an in-place node: the GEMM only with the scales / zero points it was
  // prepared from.
  const Int4Sm90Prepared* InPlaceSm90(const MatMulInt4Problem& p) {
    if (p.scales == in_place_scales_ && p.zero_points == in_place_zp_) return &sm90_;
    in_place_no_gemm_ = sm90_;
    in_place_no_gemm_.scales_t = nullptr;
    in_place_no_gemm_.zeros_t = nullptr;
    return &in_place_no_gemm_;
  }

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
  int mid_rows_;
  StagedSplitLimits staged_split_;  // PYQUANT_STAGED_MAX_CLUSTER / _SPLIT_Z
  int64_t staged_max_m_;            // PYQUANT_INT4_STAGED_MAX_M (LaunchMatMulInt4's staged_max_m)
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
  const void* in_place_b_ = nullptr;   // B, rewritten in the shuffled order (ShuffleInPlace)
  void* in_place_prepared_ = nullptr;  // its scales_t / zeros_t
  const void* in_place_scales_ = nullptr;
  const void* in_place_zp_ = nullptr;
  Int4Sm90Prepared in_place_no_gemm_;
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
  if (v != nullptr && std::strcmp(v, "nosplit") == 0) return kInt4MidNoKSplit;
  if (v != nullptr && std::strcmp(v, "nostaged") == 0) return kInt4MidNoStaged;
  return v != nullptr && *v ? static_cast<int>(std::strtol(v, nullptr, 10)) : -1;
}

int CudaInt4MidRows() {
  const int rows = EnvInt("PYQUANT_INT4_MID_ROWS", 0);
  return rows == 32 || rows == 64 ? rows : 0;
}

int CudaInt4Sm90Tile() {
  return EnvChoice("PYQUANT_INT4_SM90_TILE",
                   {"auto", "c1", "c2m", "k128", "p128", "p256", "p64", "shuf", "coop", "w192", "p192"}, 0);
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
