// Portable small-M kernels (any CPU; PYQUANT_CPU_ISA=base) and the ISA dispatch of cpu/gemv.h.
#include <cmath>

#include "common/dtypes.h"
#include "cpu/blocked_gemm.h"
#include "cpu/gemv.h"
#include "layout/int4_block.h"

namespace pyquant {

namespace {

template <class ST>
void Int4RowsScalar(const Int4GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t half = p.block_size / 2;
  const int64_t row_bytes = p.n_blocks * half;
  const int64_t zp_row_bytes = (p.n_blocks + 1) / 2;
  const ST* scales = static_cast<const ST*>(p.scales);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* brow = p.b + n * row_bytes;
    for (int64_t m = 0; m < p.m; ++m) {
      const float* xe = p.xe + m * p.x_stride;
      const float* xo = p.xo + m * p.x_stride;
      float acc = 0.0f;
      for (int64_t blk = 0; blk < p.n_blocks; ++blk) {
        const float zp =
            static_cast<float>(p.zp ? Int4ZeroPointAt(p.zp + n * zp_row_bytes, blk) : kInt4SymmetricZeroPoint);
        // Four partial sums: independent chains the compiler can keep in flight.
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const int64_t j0 = blk * half;
        for (int64_t j = j0; j < j0 + half; j += 2) {
          const uint8_t b0 = brow[j], b1 = brow[j + 1];
          s[0] += xe[j] * (static_cast<float>(b0 & 0xF) - zp);
          s[1] += xo[j] * (static_cast<float>(b0 >> 4) - zp);
          s[2] += xe[j + 1] * (static_cast<float>(b1 & 0xF) - zp);
          s[3] += xo[j + 1] * (static_cast<float>(b1 >> 4) - zp);
        }
        acc += ((s[0] + s[1]) + (s[2] + s[3])) * ToFloat(scales[n * p.n_blocks + blk]);
      }
      y[m * ldy + (n - n0)] = acc;
    }
  }
}

// e4m3 code -> w / 256 (the scaling the ISA kernels use; x comes in times 256). NaN stays NaN.
struct Fp8Div256Table {
  float v[256];
  Fp8Div256Table() {
    for (int i = 0; i < 256; ++i) v[i] = Fp8E4M3ToFloat(static_cast<uint8_t>(i)) * 0.00390625f;
  }
};

}  // namespace

namespace gemv_isa {

void Int4RowsBase(const Int4GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (p.scale_type) {
    case ScaleType::kFloat16: Int4RowsScalar<Half>(p, n0, n1, y, ldy); break;
    case ScaleType::kBFloat16: Int4RowsScalar<BFloat16>(p, n0, n1, y, ldy); break;
    default: Int4RowsScalar<float>(p, n0, n1, y, ldy); break;
  }
}

void Fp8RowsBase(const Fp8GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  static const Fp8Div256Table table;
  const int64_t sb = p.block_size > 0 ? p.block_size : p.k;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* wrow = p.w + n * p.k;
    for (int64_t m = 0; m < p.m; ++m) {
      const float* xs = p.xs + m * p.x_stride;
      float acc = 0.0f;
      for (int64_t kb = 0, blk = 0; kb < p.k; kb += sb, ++blk) {
        const int64_t ke = kb + sb < p.k ? kb + sb : p.k;
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int64_t k = kb;
        for (; k + 4 <= ke; k += 4)
          for (int i = 0; i < 4; ++i) s[i] += xs[k + i] * table.v[wrow[k + i]];
        for (; k < ke; ++k) s[0] += xs[k] * table.v[wrow[k]];
        const float sum = (s[0] + s[1]) + (s[2] + s[3]);
        acc += p.block_size > 0 ? sum * p.w_scale[n * p.n_scale_blocks + blk] : sum;
      }
      y[m * ldy + (n - n0)] = acc;
    }
  }
}

}  // namespace gemv_isa

void Int4GemvRows(const Int4GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  static const auto fn = [] {
    switch (CpuIsa()) {
      case CpuIsaLevel::kAvx512: return &gemv_isa::Int4RowsAvx512;
      case CpuIsaLevel::kAvx2: return &gemv_isa::Int4RowsAvx2;
      default: return &gemv_isa::Int4RowsBase;
    }
  }();
  fn(p, n0, n1, y, ldy);
}

void Fp8GemvRows(const Fp8GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  static const auto fn = [] {
    switch (CpuIsa()) {
      case CpuIsaLevel::kAvx512: return &gemv_isa::Fp8RowsAvx512;
      case CpuIsaLevel::kAvx2: return &gemv_isa::Fp8RowsAvx2;
      default: return &gemv_isa::Fp8RowsBase;
    }
  }();
  fn(p, n0, n1, y, ldy);
}

}  // namespace pyquant
