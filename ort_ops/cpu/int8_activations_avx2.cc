// AVX2 kernel of the int8-activation MatMulInt4 (cpu/int8_activations.h): vpmaddubsw dot products.
// Int4Int8Rows calls it on CPUs that have AVX2 but not AVX512-VNNI (and under PYQUANT_CPU_ISA=avx2).
#define PYQUANT_INT8_ENTRY Int4Int8RowsAvx2
#define PYQUANT_INT8_PACKED_ENTRY Int4Int8PackedRowsAvx2
#define PYQUANT_INT8_TARGET "avx2,fma,f16c"
#define PYQUANT_INT8_VNNI 0
#include "cpu/int8_activations_unit.inc"

// The activation quantizer's block kernels (cpu/int8_activations.h), AVX2, 16 values per step. Why:
// the portable loop (int8_activations.cc, compiled for the baseline ISA) took about as long as the
// GEMM itself on narrow layers at large M (one thread, K x N = 1536 x 384, M = 2048: 43 % of the
// op's samples in perf). Bit-identical to it: the same float32 product, rounded half to even by
// vroundps instead of the 1.5 * 2^23 trick (the same value; only the sign of a zero may differ,
// which the int8 code does not keep), NaN -> 0, clamp to +-127 (values from vroundps are integers:
// vcvtps2dq is exact), and the same int32 sum.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cfloat>
#include <cstring>

namespace pyquant::int8_isa {

__attribute__((target("avx2,fma,f16c"))) bool BlockAbsMaxAvx2(const float* x, int64_t len, float* amax) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 fmax = _mm256_set1_ps(FLT_MAX);
  __m256 m = _mm256_setzero_ps(), ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  int64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(a, fmax, _CMP_LE_OQ));  // false for Inf and NaN
    m = _mm256_max_ps(m, a);  // a NaN lane makes the block non-finite: m is not used then
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float r = 0.0f;
  for (float v : lanes) r = v > r ? v : r;
  // the tail (len % 8 values), as the portable loop
  float tail = 0.0f;
  const bool finite = BlockAbsMaxBase(x + i, len - i, &tail) && _mm256_movemask_ps(ok) == 0xFF;
  *amax = tail > r ? tail : r;
  return finite;
}

namespace {
// 8 values -> their int32 codes (added to *vsum), evens first: [4 evens | 4 odds].
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256i Codes8(const float* p, __m256 vinv,
                                                                              __m256i* vsum) {
  __m256 q = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(p), vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  q = _mm256_and_ps(q, _mm256_cmp_ps(q, q, _CMP_ORD_Q));  // NaN -> +0
  q = _mm256_min_ps(_mm256_max_ps(q, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  const __m256i c = _mm256_cvtps_epi32(q);
  *vsum = _mm256_add_epi32(*vsum, c);
  return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
}
}  // namespace

__attribute__((target("avx2,fma,f16c"))) int32_t QuantizeBlockAvx2(const float* x, int64_t len, float inv, int8_t* even,
                                                                   int8_t* odd) {
  const __m256 vinv = _mm256_set1_ps(inv);
  __m256i vsum = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    const __m256i a = Codes8(x + i, vinv, &vsum), b = Codes8(x + i + 8, vinv, &vsum);
    const __m256i ev = _mm256_permute2x128_si256(a, b, 0x20), od = _mm256_permute2x128_si256(a, b, 0x31);
    // int32 -> int8 (|c| <= 127: the saturating packs are exact): per 128-bit lane, bytes 0-3 of
    // ev then od, i.e. low lane ev 0-3, od 0-3; high lane ev 4-7, od 4-7.
    const __m256i p16 = _mm256_packs_epi32(ev, od);
    const __m256i p8 = _mm256_packs_epi16(p16, p16);
    const uint64_t l = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm256_castsi256_si128(p8)));
    const uint64_t h = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm256_extracti128_si256(p8, 1)));
    const uint64_t e8 = (l & 0xFFFFFFFFu) | (h << 32), o8 = (l >> 32) | (h & 0xFFFFFFFF00000000u);
    std::memcpy(even + i / 2, &e8, 8);
    std::memcpy(odd + i / 2, &o8, 8);
  }
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), vsum);
  int32_t sum = 0;
  for (int32_t v : lanes) sum += v;
  // the tail (a block shorter than 16 codes at K's end, or len % 16), as the portable loop
  return sum + QuantizeBlockBase(x + i, len - i, inv, even + i / 2, odd + i / 2);
}

}  // namespace pyquant::int8_isa
#else
namespace pyquant::int8_isa {
bool BlockAbsMaxAvx2(const float* x, int64_t len, float* amax) { return BlockAbsMaxBase(x, len, amax); }
int32_t QuantizeBlockAvx2(const float* x, int64_t len, float inv, int8_t* even, int8_t* odd) {
  return QuantizeBlockBase(x, len, inv, even, odd);
}
}  // namespace pyquant::int8_isa
#endif
