// LinearFp8 on the CPU execution provider (see docs/ops.md and cpu/blocked_gemm.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <vector>

#include "cpu/blocked_gemm.h"
#include "cpu/cpu_types.h"
#include "cpu/fp8_bf16_gemm.h"
#include "cpu/gemv.h"
#include "cpu/register_cpu.h"
#include "ops/linear_fp8.h"

namespace pyquant {

namespace {

// e4m3fn code -> float, exact.
const std::array<float, 256>& Fp8Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = Fp8E4M3ToFloat(static_cast<uint8_t>(i));
    return t;
  }();
  return table;
}

template <ONNXTensorElementDataType kType>
class LinearFp8Cpu final : public Kernel {
  using T = typename CpuType<kType>::type;

 public:
  explicit LinearFp8Cpu(const OrtKernelInfo* info)
      : attrs_(ReadLinearFp8Attrs(info)), bf16_gemm_(Fp8Bf16GemmAvailable()) {
    CheckLinearFp8Constants(info, attrs_, kType);
  }

  void Compute(OrtKernelContext* ctx) override {
    const LinearFp8Problem p = BindLinearFp8(ctx, attrs_, kType);
    const int64_t m = p.m, k = p.k, n = p.n;

    // 1. Quantize activations row by row (bit-exact rule of docs/ops.md); keep them as floats,
    //    which hold every e4m3 value exactly. The small-M path wants them times 256 (exact; see
    //    Fp8GemvParams) in rows padded with zeros to a multiple of 16.
    //    weight_only: X as float32, not quantized. The small-M kernels multiply by w / 256, so
    //    there the rows' scale s_x is 256 instead (a power of two: the same products, scaled
    //    exactly, barring float32 underflow below 2^-118); elsewhere 1.
    const bool bf16 = bf16_gemm_ && p.block_size == 0 && !p.weight_only;
    const bool gemv = m > 0 && m <= GemvMaxM(bf16 ? kFp8Bf16GemvMaxM : kFp8GemvMaxM);
    if (!gemv && bf16) {
      ComputeBf16(ctx, p);
      return;
    }
    // (+16 floats: rows 64 bytes off a 4 KiB multiple apart, see matmul_int4_cpu.cc.)
    const int64_t ldx = gemv ? (k + 15) / 16 * 16 + 16 : k;
    const float x_mul = gemv ? 256.0f : 1.0f;
    // QuantizeFp8Row (cpu/blocked_gemm.h) runs the amax and rounding passes in the CPU's vector
    // width. Uninitialized: every element is written.
    std::unique_ptr<float[]> xq(new float[static_cast<size_t>(m * ldx)]);
    std::vector<float> s_x(static_cast<size_t>(m));
    const auto& table = Fp8Table();
    ParallelFor(ctx, static_cast<size_t>(m), [&](size_t row) {
      float* out = xq.get() + static_cast<int64_t>(row) * ldx;
      s_x[row] = QuantizedRow(p, static_cast<int64_t>(row), x_mul, out);
      for (int64_t i = k; i < ldx; ++i) out[i] = 0.0f;
    });

    // 2. Y = s_x * (xq · (w * s_w)^T) + bias.
    const T* bias = static_cast<const T*>(p.bias);
    T* y = static_cast<T*>(p.y);
    if (gemv) {
      Fp8GemvParams gp;
      gp.xs = xq.get();
      gp.x_stride = ldx;
      gp.m = m;
      gp.k = k;
      gp.w = p.w;
      gp.w_scale = p.w_scale;
      gp.block_size = p.block_size;
      gp.n_scale_blocks = p.n_scale_blocks;
      RunGemvTasks(
          ctx, m, n, k,
          [&](int64_t n0, int64_t n1, float* acc, int64_t ld_acc) { Fp8GemvRows(gp, n0, n1, acc, ld_acc); },
          [&](int64_t mi, int64_t j, float sum) {
            // Per-channel scale here (the kernel returns the raw sum); per-block ones are folded.
            const float s = p.block_size == 0 ? sum * p.w_scale[j] : sum;
            y[mi * n + j] = FromFloat<T>(s * s_x[mi] + (bias ? ToFloat(bias[j]) : 0.0f));
          });
      return;
    }
    // Scale rows per panel chunk: one row per (block within the chunk); per-channel scales are one
    // block as long as the chunk. Block sizes >= kKc are multiples of it, so a chunk never straddles.
    static const uint8_t kZeroRow[kKc] = {};
    const int64_t scale_block = p.block_size == 0 ? kKc : std::min<int64_t>(p.block_size, kKc);
    auto decode = [&](int64_t n0, int cols, int64_t k0, int64_t kc, float* bt) {
      const uint8_t* rows[kNr];
      alignas(64) float sc[kKc * kNr / 16];
      const int64_t nblk = (kc + scale_block - 1) / scale_block;
      for (int j = 0; j < kNr; ++j) {
        if (j < cols) {
          const int64_t row = n0 + j;
          rows[j] = p.w + row * k + k0;
          const float* ws = p.w_scale + row * p.n_scale_blocks;
          for (int64_t b = 0; b < nblk; ++b)
            sc[b * kNr + j] = p.block_size == 0 ? ws[0] : ws[(k0 + b * scale_block) / p.block_size];
        } else {
          rows[j] = kZeroRow;  // e4m3 code 0 is +0
          for (int64_t b = 0; b < nblk; ++b) sc[b * kNr + j] = 0.0f;
        }
      }
      DecodeFp8Panel(rows, table.data(), sc, scale_block, kc, bt);
    };
    auto epilogue = [&](int64_t r, int64_t n0, int cols, const float* acc) {
      T* out = y + r * n + n0;
      const float sx = s_x[r];
      for (int j = 0; j < cols; ++j) {
        const float b = bias ? ToFloat(bias[n0 + j]) : 0.0f;
        out[j] = FromFloat<T>(acc[j] * sx + b);
      }
    };
    DecodeGemm(ctx, xq.get(), m, k, n, decode, epilogue);
  }

 private:
  // Row `row` of X as floats into out[0 .. K): quantized in place by the rule of docs/ops.md times
  // `mul` (weight_only: only converted). Returns the row's scale s_x (weight_only: mul).
  static float QuantizedRow(const LinearFp8Problem& p, int64_t row, float mul, float* out) {
    const T* xr = static_cast<const T*>(p.x) + row * p.k;
    for (int64_t i = 0; i < p.k; ++i) out[i] = ToFloat(xr[i]);
    return p.weight_only ? mul : QuantizeFp8Row(out, p.k, !p.static_scale, 1.0f / p.x_scale, p.x_scale, mul);
  }

  // Large M, per-channel weight scales, quantized activations, on AVX512-BF16 (cpu/fp8_bf16_gemm.h):
  // the rows quantized as above into float, then stored as bf16 (exact) for vdpbf16ps.
  void ComputeBf16(OrtKernelContext* ctx, const LinearFp8Problem& p) {
    const int64_t m = p.m, k = p.k, n = p.n;
    const int64_t lda = (k + 1) / 2 * 2;
    std::unique_ptr<uint16_t[]> xb(new uint16_t[static_cast<size_t>(m * lda)]);
    std::vector<float> s_x(static_cast<size_t>(m));
    ParallelFor(ctx, static_cast<size_t>(m), [&](size_t row) {
      thread_local std::vector<float> buf;
      buf.resize(static_cast<size_t>(k));
      s_x[row] = QuantizedRow(p, static_cast<int64_t>(row), 1.0f, buf.data());
      uint16_t* out = xb.get() + static_cast<int64_t>(row) * lda;
      for (int64_t i = 0; i < k; ++i) out[i] = Fp8ValueToBf16Bits(buf[i]);
      for (int64_t i = k; i < lda; ++i) out[i] = 0;
    });
    const T* bias = static_cast<const T*>(p.bias);
    T* y = static_cast<T*>(p.y);
    Fp8Bf16Gemm(ctx, xb.get(), lda, m, k, n, p.w, [&](int64_t r, int64_t n0, int cols, const float* acc) {
      T* out = y + r * n + n0;
      const float sx = s_x[r];
      for (int j = 0; j < cols; ++j) {
        // As the reference: (sum * w_scale) * s_x + bias.
        const float b = bias ? ToFloat(bias[n0 + j]) : 0.0f;
        out[j] = FromFloat<T>(acc[j] * p.w_scale[n0 + j] * sx + b);
      }
    });
  }

  LinearFp8Attrs attrs_;
  bool bf16_gemm_;  // Fp8Bf16GemmAvailable() at kernel creation
};

template <ONNXTensorElementDataType kType>
OpDef MakeDef() {
  OpDef d = LinearFp8OpDef(kType, nullptr);
  d.input_on_cpu.clear();
  d.create = [](const OrtKernelInfo* info, const std::string&) -> std::unique_ptr<Kernel> {
    return std::make_unique<LinearFp8Cpu<kType>>(info);
  };
  return d;
}

}  // namespace

void AppendLinearFp8CpuOps(std::vector<OpDef>& defs) {
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT>());
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16>());
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16>());
}

}  // namespace pyquant
