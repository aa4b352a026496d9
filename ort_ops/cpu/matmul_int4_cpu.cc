// MatMulInt4 on the CPU execution provider (see docs/ops.md and cpu/blocked_gemm.h).
#include <vector>

#include "cpu/blocked_gemm.h"
#include "cpu/cpu_types.h"
#include "cpu/register_cpu.h"
#include "ops/matmul_int4.h"

namespace pyquant {

namespace {

template <ONNXTensorElementDataType kType>
class MatMulInt4Cpu final : public Kernel {
  using T = typename CpuType<kType>::type;

 public:
  explicit MatMulInt4Cpu(const OrtKernelInfo* info) : attrs_(ReadMatMulInt4Attrs(info)) {
    CheckMatMulInt4Constants(info, attrs_, kType);
  }

  void Compute(OrtKernelContext* ctx) override {
    const MatMulInt4Problem p = BindMatMulInt4(ctx, attrs_, kType);
    const int64_t k = attrs_.k, n = attrs_.n, bs = attrs_.block_size, nb = attrs_.n_blocks();
    const int64_t row_bytes = Int4RowBytes(k, bs);
    const int64_t zp_row_bytes = Int4ZeroPointRowBytes(k, bs);
    std::vector<float> x_storage;
    const float* a = AsFloat<T>(ctx, p.x, p.m * k, x_storage);
    const T* scales = static_cast<const T*>(p.scales);
    const T* bias = static_cast<const T*>(p.bias);
    T* y = static_cast<T*>(p.y);

    auto decode = [&](int64_t n0, int cols, int64_t k0, int64_t kc, float* bt) {
      for (int j = 0; j < cols; ++j) {
        const int64_t row = n0 + j;
        const uint8_t* codes = p.b + row * row_bytes;
        const uint8_t* zp_row = p.zero_points ? p.zero_points + row * zp_row_bytes : nullptr;
        // k0 is a multiple of bs (kKc is), so the chunk is whole blocks plus maybe a tail.
        for (int64_t kb = 0; kb < kc; kb += bs) {
          const int64_t blk = (k0 + kb) / bs;
          const float s = ToFloat(scales[row * nb + blk]);
          const float zp = static_cast<float>(zp_row ? Int4ZeroPointAt(zp_row, blk) : kInt4SymmetricZeroPoint);
          const int64_t len = std::min<int64_t>(bs, kc - kb);
          const uint8_t* blk_codes = codes + (k0 + kb) / 2;
          float* out = bt + kb * kNr + j;
          for (int64_t i = 0; i < len; ++i) {
            const uint8_t byte = blk_codes[i >> 1];
            const int q = (i & 1) ? (byte >> 4) : (byte & 0xF);
            out[i * kNr] = (static_cast<float>(q) - zp) * s;
          }
        }
      }
      for (int j = cols; j < kNr; ++j)
        for (int64_t i = 0; i < kc; ++i) bt[i * kNr + j] = 0.0f;
    };
    auto epilogue = [&](int64_t r, int64_t n0, int cols, const float* acc) {
      T* out = y + r * n + n0;
      for (int j = 0; j < cols; ++j) {
        const float b = bias ? ToFloat(bias[n0 + j]) : 0.0f;
        out[j] = FromFloat<T>(acc[j] + b);
      }
    };
    DecodeGemm(ctx, a, p.m, k, n, decode, epilogue);
  }

 private:
  MatMulInt4Attrs attrs_;
};

template <ONNXTensorElementDataType kType>
OpDef MakeDef() {
  OpDef d = MatMulInt4OpDef(kType, nullptr);
  d.create = [](const OrtKernelInfo* info, const std::string&) -> std::unique_ptr<Kernel> {
    return std::make_unique<MatMulInt4Cpu<kType>>(info);
  };
  return d;
}

}  // namespace

void AppendMatMulInt4CpuOps(std::vector<OpDef>& defs) {
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT>());
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16>());
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16>());
}

}  // namespace pyquant
