// Int8-activation MatMulInt4 (cpu/int8_activations.h): the activation quantizer, the portable
// kernel (any CPU; PYQUANT_CPU_ISA=base) and the ISA dispatch. The SIMD kernels (an AVX2 and an
// AVX512-VNNI unit) are int8_activations_unit.inc.
#include "cpu/int8_activations.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/dtypes.h"
#include "cpu/blocked_gemm.h"
#include "layout/int4_block.h"

namespace pyquant {

namespace {

// Asked only where CpuIsa() is kAvx512, which already checked AVX512F / VL / BW / DQ.
bool HasAvx512Vnni() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// Round half to even of |v| < 2^22 in the default rounding mode, without SSE4.1's roundps: adding
// and subtracting 1.5 * 2^23 drops the fraction with the FPU's own rounding (nearest even). Written
// this way so that the baseline-ISA loop below vectorizes; no fast-math anywhere in this library.
inline float RoundHalfEven(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

}  // namespace

namespace int8_isa {

bool BlockAbsMaxBase(const float* x, int64_t len, float* amax) {
  float m = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < len; ++i) {
    const float a = std::fabs(x[i]);
    finite = finite && a <= std::numeric_limits<float>::max();  // false for Inf and NaN
    m = a > m ? a : m;
  }
  *amax = m;
  return finite;
}

int32_t QuantizeBlockBase(const float* x, int64_t len, float inv, int8_t* even, int8_t* odd) {
  int32_t sum = 0;
  for (int64_t i = 0; i < len; ++i) {
    // |x| * (127 / amax) rounds to <= 127, except when amax < 127 / FLT_MAX makes inv infinite:
    // then the products are +-Inf (clamped to +-127) or NaN for x = 0 (taken as 0).
    float q = RoundHalfEven(x[i] * inv);
    q = q > 127.0f ? 127.0f : (q < -127.0f ? -127.0f : (q == q ? q : 0.0f));
    (i % 2 ? odd : even)[i / 2] = static_cast<int8_t>(q);
    sum += static_cast<int32_t>(q);
  }
  return sum;
}

}  // namespace int8_isa

template <typename T>
void QuantizeActivationsInt8(const T* x, int64_t m, int64_t k, int64_t block_size, Int8Activations* out, bool lanes) {
  const int64_t nb = Int4NumBlocks(k, block_size);
  const int64_t half_padded = nb * block_size / 2;
  out->m = m;
  out->n_blocks = nb;
  out->stride = (half_padded + 31) / 32 * 32;
  out->codes.assign(static_cast<size_t>(2 * m * out->stride), 0);
  out->scales.resize(static_cast<size_t>(m * nb));
  out->sums.assign(static_cast<size_t>(m * nb), 0);
  // The block kernels of the CPU's ISA (the AVX2 ones on AVX2 and AVX-512 CPUs).
  static const bool avx2 = CpuIsa() != CpuIsaLevel::kBase;
  const auto abs_max = avx2 ? &int8_isa::BlockAbsMaxAvx2 : &int8_isa::BlockAbsMaxBase;
  const auto quantize = avx2 ? &int8_isa::QuantizeBlockAvx2 : &int8_isa::QuantizeBlockBase;
  std::vector<float> xf(std::is_same_v<T, float> ? 0 : static_cast<size_t>(block_size));
  for (int64_t mi = 0; mi < m; ++mi) {
    const T* xr = x + mi * k;
    int8_t* even = out->codes.data() + mi * out->stride;
    int8_t* odd = out->codes.data() + (m + mi) * out->stride;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * block_size;  // even: blocks are powers of two >= 16
      const int64_t len = std::min(block_size, k - k0);
      const float* xb = nullptr;
      if constexpr (std::is_same_v<T, float>) {
        xb = xr + k0;
      } else {
        for (int64_t i = 0; i < len; ++i) xf[i] = ToFloat(xr[k0 + i]);
        xb = xf.data();
      }
      float amax = 0.0f;
      const bool finite = abs_max(xb, len, &amax);
      float& s_x = out->scales[mi * nb + b];
      if (!finite || amax == 0.0f) {  // codes stay 0
        s_x = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      s_x = amax / 127.0f;
      out->sums[mi * nb + b] = quantize(xb, len, 127.0f / amax, even + k0 / 2, odd + k0 / 2);
    }
  }
  const int64_t chunks = out->stride / 32;
  if (!lanes || (block_size > 64 && m >= kInt8WideLanesMaxM)) {
    out->lane_scales.clear();
    out->lane_sums.clear();
    return;
  }
  out->lane_scales.assign(static_cast<size_t>(m * chunks * 8), 0.0f);
  out->lane_sums.assign(static_cast<size_t>(m * chunks * 8), 0);
  const int64_t lanes_per_block = block_size / 8;  // 2 .. 32
  for (int64_t mi = 0; mi < m; ++mi) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t lane0 = b * lanes_per_block;  // lanes counted over the row: 8 per chunk
      float* ls = out->lane_scales.data() + mi * chunks * 8 + lane0;
      for (int64_t l = 0; l < lanes_per_block; ++l) ls[l] = out->scales[mi * nb + b];
      out->lane_sums[mi * chunks * 8 + lane0] = out->sums[mi * nb + b];
    }
  }
}

template void QuantizeActivationsInt8<float>(const float*, int64_t, int64_t, int64_t, Int8Activations*, bool);
template void QuantizeActivationsInt8<Half>(const Half*, int64_t, int64_t, int64_t, Int8Activations*, bool);
template void QuantizeActivationsInt8<BFloat16>(const BFloat16*, int64_t, int64_t, int64_t, Int8Activations*, bool);

namespace int8_isa {

namespace {

template <class ST>
void RowsScalar(const Int4Int8Params& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const Int8Activations& x = *p.x;
  const int64_t nb = x.n_blocks, half = p.block_size / 2;
  const int64_t row_bytes = nb * half, zp_row_bytes = (nb + 1) / 2;
  const ST* scales = static_cast<const ST*>(p.scales);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* brow = p.b + n * row_bytes;
    for (int64_t m = 0; m < x.m; ++m) {
      const int8_t* xe = x.even() + m * x.stride;
      const int8_t* xo = x.odd() + m * x.stride;
      float acc = 0.0f;
      for (int64_t blk = 0; blk < nb; ++blk) {
        const int zp = p.zp ? Int4ZeroPointAt(p.zp + n * zp_row_bytes, blk) : kInt4SymmetricZeroPoint;
        int32_t dot = 0;
        for (int64_t j = blk * half; j < (blk + 1) * half; ++j) {
          dot += ((brow[j] & 0xF) - zp) * xe[j] + ((brow[j] >> 4) - zp) * xo[j];
        }
        acc += (ToFloat(scales[n * nb + blk]) * x.scales[m * nb + blk]) * static_cast<float>(dot);
      }
      y[m * ldy + (n - n0)] = acc;
    }
  }
}

}  // namespace

void Int4Int8RowsBase(const Int4Int8Params& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (p.scale_type) {
    case ScaleType::kFloat16: RowsScalar<Half>(p, n0, n1, y, ldy); break;
    case ScaleType::kBFloat16: RowsScalar<BFloat16>(p, n0, n1, y, ldy); break;
    default: RowsScalar<float>(p, n0, n1, y, ldy); break;
  }
}

}  // namespace int8_isa

namespace {

template <class ST>
void PackScales(const ST* scales, const uint8_t* zp, int64_t n, int64_t nb, Int4Int8Packed* out) {
  const int64_t zp_row_bytes = (nb + 1) / 2;
  for (int64_t row = 0; row < out->panels() * 16; ++row) {
    const int64_t p = row / 16, r = row % 16;
    for (int64_t blk = 0; blk < nb; ++blk) {
      const size_t at = static_cast<size_t>((p * nb + blk) * 16 + r);
      out->scales[at] = row < n ? ToFloat(scales[row * nb + blk]) : 0.0f;
      if (zp) out->zp[at] = row < n ? Int4ZeroPointAt(zp + row * zp_row_bytes, blk) : 0;
    }
  }
}

}  // namespace

void PackInt4Int8(const uint8_t* b, const void* scales, ScaleType scale_type, const uint8_t* zp, int64_t n,
                  int64_t n_blocks, int64_t block_size, Int4Int8Packed* out) {
  out->n = n, out->n_blocks = n_blocks, out->block_size = block_size;
  const int64_t row_bytes = n_blocks * block_size / 2;  // a multiple of 8 (block_size >= 16)
  out->quads = row_bytes / 4;
  const int64_t panels = out->panels();
  out->codes.assign(static_cast<size_t>(panels * out->quads * 64), 0);
  out->scales.assign(static_cast<size_t>(panels * n_blocks * 16), 0.0f);
  out->zp.assign(zp ? static_cast<size_t>(panels * n_blocks * 16) : 0, 0);
  for (int64_t row = 0; row < n; ++row) {
    const int64_t p = row / 16, r = row % 16;
    const uint8_t* src = b + row * row_bytes;
    uint8_t* dst = out->codes.data() + p * out->quads * 64 + 4 * r;
    for (int64_t q = 0; q < out->quads; ++q) std::memcpy(dst + q * 64, src + 4 * q, 4);
  }
  switch (scale_type) {
    case ScaleType::kFloat16: PackScales(static_cast<const Half*>(scales), zp, n, n_blocks, out); break;
    case ScaleType::kBFloat16: PackScales(static_cast<const BFloat16*>(scales), zp, n, n_blocks, out); break;
    default: PackScales(static_cast<const float*>(scales), zp, n, n_blocks, out); break;
  }
}

namespace {

// The int8 kernels' unit for this CPU, chosen once for every entry point: the AVX512-VNNI unit, the
// AVX2 one (AVX2 CPUs, and AVX-512 ones without VNNI), or the portable code.
enum class Int8Unit { kBase, kAvx2, kVnni };
Int8Unit CurrentInt8Unit() {
  static const Int8Unit unit = [] {
    switch (CpuIsa()) {
      case CpuIsaLevel::kAvx512: return HasAvx512Vnni() ? Int8Unit::kVnni : Int8Unit::kAvx2;
      case CpuIsaLevel::kAvx2: return Int8Unit::kAvx2;
      default: return Int8Unit::kBase;
    }
  }();
  return unit;
}

}  // namespace

bool Int4Int8PackedAvailable() { return CurrentInt8Unit() != Int8Unit::kBase; }

void Int4Int8PackedRows(const Int4Int8Packed& pk, const Int8Activations& x, int64_t n0, int64_t n1, float* y,
                        int64_t ldy) {
  (CurrentInt8Unit() == Int8Unit::kVnni ? &int8_isa::Int4Int8PackedRowsVnni : &int8_isa::Int4Int8PackedRowsAvx2)(
      pk, x, n0, n1, y, ldy);
}

void Int4Int8Rows(const Int4Int8Params& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (CurrentInt8Unit()) {
    case Int8Unit::kVnni: int8_isa::Int4Int8RowsVnni(p, n0, n1, y, ldy); break;
    case Int8Unit::kAvx2: int8_isa::Int4Int8RowsAvx2(p, n0, n1, y, ldy); break;
    default: int8_isa::Int4Int8RowsBase(p, n0, n1, y, ldy);
  }
}

}  // namespace pyquant
