// AVX2 kernel of the int8-activation MatMulInt4 (cpu/int8_activations.h): the body in
// int8_activations_kernels.inc with vpmaddubsw dot products. Compiled for "avx2,fma,f16c" in this
// translation unit only; Int4Int8Rows calls it on CPUs that have AVX2 but not AVX512-VNNI.
#include "common/dtypes.h"
#include "cpu/int8_activations.h"
#include "layout/int4_block.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace pyquant {
namespace int8_isa {
namespace {

// vpmaddubsw: 16-bit sums of byte pairs (at most 2 * 15 * 127 = 3810; the two halves added 7620, far
// from int16 saturation), then vpmaddwd by 1 to int32 lanes.
inline __m256i DotAcc(__m256i acc, __m256i lo, __m256i hi, const int8_t* xe, const int8_t* xo) {
  const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xe));
  const __m256i o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xo));
  const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, e), _mm256_maddubs_epi16(hi, o));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

}  // namespace
}  // namespace int8_isa
}  // namespace pyquant

#define PYQUANT_INT8_ENTRY Int4Int8RowsAvx2
#include "cpu/int8_activations_kernels.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // not x86 with GCC / Clang: the portable kernel answers
namespace pyquant::int8_isa {
void Int4Int8RowsAvx2(const Int4Int8Params& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  Int4Int8RowsBase(p, n0, n1, y, ldy);
}
}  // namespace pyquant::int8_isa
#endif
