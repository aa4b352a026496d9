// The AVX512-BF16 kernels of cpu/fp8_bf16_gemm.h (layouts there). Compiled for that ISA with a
// target attribute; Fp8Bf16GemmAvailable() says whether the CPU runs them.
#include "cpu/fp8_bf16_gemm.h"

#include <array>
#include <cstdlib>
#include <cstring>

#include "common/dtypes.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PYQUANT_BF16_KERNELS 1
#define PYQUANT_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bf16")))
#endif

namespace pyquant {

namespace {

// e4m3fn code -> bf16 bits, exact (NaN codes -> a quiet NaN of their sign).
const std::array<uint16_t, 256>& Bf16Table() {
  static const std::array<uint16_t, 256> table = [] {
    std::array<uint16_t, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = Fp8ValueToBf16Bits(Fp8E4M3ToFloat(static_cast<uint8_t>(i)));
    return t;
  }();
  return table;
}

bool CpuHasAvx512Bf16() {
#ifdef PYQUANT_BF16_KERNELS
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
#else
  return false;
#endif
}

#ifdef PYQUANT_BF16_KERNELS
// R rows of A against two panels: 2 R accumulators (R <= 8: 16 zmm), per k-pair two panel loads
// and R broadcasts of A's pair.
template <int R>
PYQUANT_TARGET_AVX512_BF16 inline void Bf16Rows(const uint16_t* a, int64_t lda, const uint32_t* bt0,
                                                const uint32_t* bt1, int64_t pairs, float* acc0, float* acc1) {
  __m512 c0[R], c1[R];
  for (int r = 0; r < R; ++r) {
    c0[r] = _mm512_loadu_ps(acc0 + r * kNr);
    c1[r] = _mm512_loadu_ps(acc1 + r * kNr);
  }
  for (int64_t i = 0; i < pairs; ++i) {
    const __m512i w0 = _mm512_loadu_si512(bt0 + i * kNr);
    const __m512i w1 = _mm512_loadu_si512(bt1 + i * kNr);
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * i, sizeof(pair));
      const __m512i x = _mm512_set1_epi32(pair);
      c0[r] = _mm512_dpbf16_ps(c0[r], (__m512bh)x, (__m512bh)w0);
      c1[r] = _mm512_dpbf16_ps(c1[r], (__m512bh)x, (__m512bh)w1);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(acc0 + r * kNr, c0[r]);
    _mm512_storeu_ps(acc1 + r * kNr, c1[r]);
  }
}
#endif

}  // namespace

bool Fp8Bf16GemmAvailable() {
  const char* v = std::getenv("PYQUANT_CPU_FP8_BF16");
  if (v != nullptr && std::strcmp(v, "0") == 0) return false;
  return CpuIsa() == CpuIsaLevel::kAvx512 && CpuHasAvx512Bf16();
}

void DecodeFp8PanelBf16(const uint8_t* const* rows, int64_t kc, uint32_t* bt) {
  const auto& t = Bf16Table();
  const int64_t full = kc / 2;
  for (int64_t i = 0; i < full; ++i) {
    for (int j = 0; j < kNr; ++j) {
      bt[i * kNr + j] = uint32_t(t[rows[j][2 * i]]) | (uint32_t(t[rows[j][2 * i + 1]]) << 16);
    }
  }
  if (kc % 2 != 0) {  // K's odd tail: the pair's second value is past K (zero; never read)
    for (int j = 0; j < kNr; ++j) bt[full * kNr + j] = t[rows[j][kc - 1]];
  }
}

void MicroKernelBf16x2(const uint16_t* a, int64_t lda, int rows, const uint32_t* bt0, const uint32_t* bt1,
                       int64_t pairs, float* acc0, float* acc1) {
#ifdef PYQUANT_BF16_KERNELS
  while (rows > 0) {
    const int r = rows >= 8 ? 8 : rows >= 4 ? 4 : rows >= 2 ? 2 : 1;
    switch (r) {
      case 8: Bf16Rows<8>(a, lda, bt0, bt1, pairs, acc0, acc1); break;
      case 4: Bf16Rows<4>(a, lda, bt0, bt1, pairs, acc0, acc1); break;
      case 2: Bf16Rows<2>(a, lda, bt0, bt1, pairs, acc0, acc1); break;
      default: Bf16Rows<1>(a, lda, bt0, bt1, pairs, acc0, acc1); break;
    }
    a += r * lda;
    acc0 += r * kNr;
    acc1 += r * kNr;
    rows -= r;
  }
#else
  (void)a, (void)lda, (void)rows, (void)bt0, (void)bt1, (void)pairs, (void)acc0, (void)acc1;
#endif
}

}  // namespace pyquant
