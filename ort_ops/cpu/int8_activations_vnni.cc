// AVX512-VNNI kernel of the int8-activation MatMulInt4 (cpu/int8_activations.h): the body in
// int8_activations_kernels.inc with vpdpbusd, which multiplies unsigned by signed bytes and adds
// each group of 4 products straight into an int32 lane (no 16-bit intermediate, one instruction in
// place of vpmaddubsw + vpaddw + vpmaddwd + vpaddd). 256-bit vectors (AVX512VL): the same lanes and
// tiles as the AVX2 kernel, so both give bit-identical results. Compiled for AVX512-VNNI in this
// translation unit only; Int4Int8Rows calls it on CPUs that have it (Ice Lake / Zen 4 and later)
// unless PYQUANT_CPU_ISA caps the ISA below avx512.
#include "common/dtypes.h"
#include "cpu/int8_activations.h"
#include "layout/int4_block.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#endif

namespace pyquant {
namespace int8_isa {
namespace {

inline __m256i DotAcc(__m256i acc, __m256i lo, __m256i hi, const int8_t* xe, const int8_t* xo) {
  acc = _mm256_dpbusd_epi32(acc, lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xe)));
  return _mm256_dpbusd_epi32(acc, hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xo)));
}

}  // namespace
}  // namespace int8_isa
}  // namespace pyquant

#define PYQUANT_INT8_ENTRY Int4Int8RowsVnni
#include "cpu/int8_activations_kernels.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // not x86 with GCC / Clang: the portable kernel answers
namespace pyquant::int8_isa {
void Int4Int8RowsVnni(const Int4Int8Params& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  Int4Int8RowsBase(p, n0, n1, y, ldy);
}
}  // namespace pyquant::int8_isa
#endif
