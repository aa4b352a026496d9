// AVX-512 (F/BW/VL/DQ) instantiation of the small-M kernels (cpu/gemv.h, cpu/gemv_kernels.inc).
// Every header is included before the target pragma, so only the code of this file (internal
// linkage) is compiled for AVX-512; the dispatcher calls it only on CPUs that have it.
#include "cpu/gemv.h"

#include "common/dtypes.h"
#include "layout/int4_block.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PYQUANT_GEMV_X86 1
#endif

#if defined(PYQUANT_GEMV_X86)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#endif
#endif

namespace pyquant {

#if defined(PYQUANT_GEMV_X86)
namespace {
#define PYQUANT_GEMV_F16C 1

// 512-bit Ops policy of gemv_kernels.inc: one INT4 chunk = 16 bytes = 32 codes (block_size >= 32;
// block 16 = 8 bytes runs the 256-bit policy below), one FP8 chunk = 16 codes.
struct OpsAvx512 {
  static constexpr int kL = 16;
  using V = __m512;
  using NanAcc = __m128i;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static V Set1(float v) { return _mm512_set1_ps(v); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float HSum(V v) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // p: 16 packed bytes -> 16 even-k and 16 odd-k values of (q - zp), exact (see OpsAvx2::Int4 for
  // the 2^23 trick). Per 32 codes: one widening load, one ternlog ((b & 15) | 2^23), one shift +
  // OR, two subtractions.
  static void Int4(const uint8_t* p, V zpm, V& lo, V& hi) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i magic = _mm512_set1_epi32(0x4B000000);
    // imm 0xEA = (A & B) | C with A = b, B = 0xF, C = magic.
    const __m512i l = _mm512_ternarylogic_epi32(b, _mm512_set1_epi32(0xF), magic, 0xEA);
    const __m512i h = _mm512_or_si512(_mm512_srli_epi32(b, 4), magic);
    lo = _mm512_sub_ps(_mm512_castsi512_ps(l), zpm);
    hi = _mm512_sub_ps(_mm512_castsi512_ps(h), zpm);
  }
  static NanAcc NanInit() { return _mm_setzero_si128(); }
  // 16 e4m3 codes -> w / 256 through the fp16 bit pattern (see OpsAvx2::Fp8).
  static V Fp8(const uint8_t* p, NanAcc& nan) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    nan = _mm_max_epu8(nan, _mm_or_si128(raw, _mm_set1_epi8(static_cast<char>(0x80))));
    __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(raw), 7);
    h = _mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0xBF80)));
    return _mm512_cvtph_ps(h);
  }
  static bool NanAny(NanAcc nan) {
    return _mm_movemask_epi8(_mm_cmpeq_epi8(nan, _mm_set1_epi8(static_cast<char>(0xFF)))) != 0;
  }
};

#include "cpu/gemv_ops_avx2.inc"
#include "cpu/gemv_kernels.inc"
#undef PYQUANT_GEMV_F16C
}  // namespace

namespace gemv_isa {
void Int4RowsAvx512(const Int4GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  // Up to 8 rows of X share each decoded chunk. (16 fits the 32 zmm registers in the folded form and
  // gemv_kernels.inc supports it, but measured no better: the K chunk that keeps 16 rows of X in L1
  // is half as long, so the per-chunk horizontal sums double, and the 32 X row pointers spill.)
  if (p.block_size >= 2 * OpsAvx512::kL) {
    Int4RowsAnyScale<OpsAvx512, 8>(p, n0, n1, y, ldy);
  } else {
    Int4RowsAnyScale<OpsAvx2, 4>(p, n0, n1, y, ldy);  // block 16: 8-byte blocks
  }
}
void Fp8RowsAvx512(const Fp8GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  Fp8Rows<OpsAvx512, 8>(p, n0, n1, y, ldy);
}
}  // namespace gemv_isa
#else
namespace gemv_isa {
void Int4RowsAvx512(const Int4GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  Int4RowsBase(p, n0, n1, y, ldy);
}
void Fp8RowsAvx512(const Fp8GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  Fp8RowsBase(p, n0, n1, y, ldy);
}
}  // namespace gemv_isa
#endif

}  // namespace pyquant

#if defined(PYQUANT_GEMV_X86)
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
