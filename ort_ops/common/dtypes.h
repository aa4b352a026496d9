// Bit-exact scalar conversions between float32 and the 16-bit / 8-bit float formats the ops use.
// Host code (CPU kernels, validation); the CUDA kernels use the cuda_fp16/bf16/fp8 intrinsics,
// which implement the same IEEE round-to-nearest-even.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "layout/int4_block.h"

namespace pyquant {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "16-bit float wrappers");

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float ToFloat(float x) { return x; }

inline float ToFloat(BFloat16 x) { return BitsToFloat(static_cast<uint32_t>(x.bits) << 16); }

inline float ToFloat(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1Fu;
  uint32_t mant = h.bits & 0x3FFu;
  if (exp == 0x1F) return BitsToFloat(sign | 0x7F800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return BitsToFloat(sign);
    // subnormal: value = mant * 2^-24, exact in float32
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

template <typename T>
T FromFloat(float f);

template <>
inline float FromFloat<float>(float f) {
  return f;
}

template <>
inline BFloat16 FromFloat<BFloat16>(float f) {
  uint32_t u = FloatToBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return BFloat16{static_cast<uint16_t>((u >> 16) | 0x40u)};  // quiet nan
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even
  return BFloat16{static_cast<uint16_t>(u >> 16)};
}

template <>
inline Half FromFloat<Half>(float f) {
  const uint32_t u = FloatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return Half{static_cast<uint16_t>(sign | 0x7E00u)};   // nan
  if (abs >= 0x477FF000u) return Half{static_cast<uint16_t>(sign | 0x7C00u)};  // >= 65520 rounds to inf
  if (abs < 0x38800000u) {
    // subnormal half (or zero): quantum 2^-24; nearbyint rounds half to even
    const float a = BitsToFloat(abs);
    const uint16_t m = static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
    return Half{static_cast<uint16_t>(sign | m)};
  }
  // normal: drop 13 mantissa bits with round to nearest even (carry may bump the exponent)
  uint32_t r = abs + 0xFFFu + ((abs >> 13) & 1u);
  r -= (112u << 23);
  return Half{static_cast<uint16_t>(sign | (r >> 13))};
}

// float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities; 0x7F / 0xFF are NaN;
// largest finite 448.
inline float Fp8E4M3ToFloat(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xFu;
  const uint32_t mant = v & 0x7u;
  if (exp == 0xF && mant == 0x7) return BitsToFloat(0x7FC00000u | sign);
  if (exp == 0) {
    const float m = static_cast<float>(mant) * 0.001953125f;  // mant * 2^-9
    return sign ? -m : m;
  }
  return BitsToFloat(sign | ((exp + 120u) << 23) | (mant << 20));
}

// Saturating float -> e4m3fn, round to nearest even (values beyond +-448 become +-448, NaN stays NaN).
inline uint8_t FloatToFp8E4M3Sat(float f) {
  const uint32_t u = FloatToBits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7F);
  const float a = BitsToFloat(abs);
  if (a >= kFp8E4M3Max) return static_cast<uint8_t>(sign | 0x7E);
  if (a < 0.015625f) {                                                     // below 2^-6: subnormal, quantum 2^-9
    const uint32_t m = static_cast<uint32_t>(std::nearbyint(a * 512.0f));  // 0..8 (8 = smallest normal)
    return static_cast<uint8_t>(sign | m);
  }
  uint32_t r = abs + 0x7FFFFu + ((abs >> 20) & 1u);  // drop 20 mantissa bits, RNE
  const uint32_t exp = (r >> 23) - 120u;
  const uint32_t mant = (r >> 20) & 0x7u;
  uint32_t code = (exp << 3) | mant;
  if (code > 0x7E) code = 0x7E;  // rounding up past 448 saturates
  return static_cast<uint8_t>(sign | code);
}

// The float value of Fp8E4M3ToFloat(FloatToFp8E4M3Sat(f)), bit for bit (NaN -> the same quiet
// NaN with f's sign), written without branches so that a loop over it vectorizes: the CPU
// LinearFp8 quantizes every activation through it. Checked against the two functions above for
// all 2^32 inputs (tools/check_fp8_round.cc).
inline float Fp8E4M3RoundSat(float f) {
  const uint32_t u = FloatToBits(f);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t abs = u & 0x7FFFFFFFu;
  // Normal range: keep 3 mantissa bits, round to nearest even (a carry may bump the exponent),
  // then saturate at 448 = 0x43E00000 (also catches infinity).
  uint32_t normal = (abs + 0x7FFFFu + ((abs >> 20) & 1u)) & 0xFFF00000u;
  normal = normal > 0x43E00000u ? 0x43E00000u : normal;
  // Below 2^-6 (0x3C800000): multiples of 2^-9. a * 512 < 8 is exact; adding 1.5 * 2^23 rounds it
  // to an integer (nearest even); subtracting it back and scaling by 2^-9 are exact.
  const float a = BitsToFloat(abs);
  const uint32_t subnormal = FloatToBits(((a * 512.0f + 12582912.0f) - 12582912.0f) * 0.001953125f);
  // Blend with all-ones / zero masks rather than ?: so that the compiler keeps the float
  // arithmetic unconditional (it may not speculate possibly-trapping float ops out of a branch)
  // and the loop over this function stays branch-free and vectorizes.
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(abs < 0x3C800000u);
  const uint32_t is_nan = 0u - static_cast<uint32_t>(abs > 0x7F800000u);
  uint32_t r = (subnormal & is_subnormal) | (normal & ~is_subnormal);
  r = (0x7FC00000u & is_nan) | (r & ~is_nan);
  return BitsToFloat(r | sign);
}

}  // namespace pyquant
