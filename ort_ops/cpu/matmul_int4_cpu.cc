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

    // Per panel: the 16 row pointers and the chunk's scales / zero points as float columns, so the
    // ISA-specific decoder (cpu/blocked_gemm.cc) only does the vectorizable part.
    static const uint8_t kZeroRow[kKc] = {};
    auto decode = [&](int64_t n0, int cols, int64_t k0, int64_t kc, float* bt) {
      constexpr int64_t kMaxBlocks = kKc / kInt4MinBlock;
      const uint8_t* rows[kNr];
      alignas(64) float sc[kMaxBlocks * kNr];
      alignas(64) float zf[kMaxBlocks * kNr];
      const int64_t blk0 = k0 / bs;  // k0 is a multiple of bs (kKc is)
      const int64_t nblk = (kc + bs - 1) / bs;
      for (int j = 0; j < kNr; ++j) {
        if (j < cols) {
          const int64_t row = n0 + j;
          rows[j] = p.b + row * row_bytes + k0 / 2;
          const uint8_t* zp_row = p.zero_points ? p.zero_points + row * zp_row_bytes : nullptr;
          for (int64_t b = 0; b < nblk; ++b) {
            sc[b * kNr + j] = ToFloat(scales[row * nb + blk0 + b]);
            zf[b * kNr + j] = static_cast<float>(zp_row ? Int4ZeroPointAt(zp_row, blk0 + b) : kInt4SymmetricZeroPoint);
          }
        } else {
          // Columns past N: zero codes, zero point and scale -> exact zeros, never stored.
          rows[j] = kZeroRow;
          for (int64_t b = 0; b < nblk; ++b) sc[b * kNr + j] = zf[b * kNr + j] = 0.0f;
        }
      }
      DecodeInt4Panel(rows, sc, zf, bs, kc, bt);
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
