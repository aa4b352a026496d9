// The AVX512-BF16 kernels of cpu/fp8_bf16_gemm.h (layouts there). Compiled for that ISA with a
// target attribute; Fp8Bf16GemmAvailable() says whether the CPU runs them.
#include "cpu/fp8_bf16_gemm.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "common/dtypes.h"

// avx512bf16 intrinsics: GCC >= 10, Clang >= 9. Older compilers (GCC 9 is Ubuntu 20.04's) build the
// scalar decoder alone, and Fp8Bf16GemmAvailable() is then false.
#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#include <immintrin.h>
#define PYQUANT_BF16_KERNELS 1
#define PYQUANT_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))
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

// The scalar decoder (a table lookup per code): K's tails, and the reference of the vector one.
void DecodeFp8PanelBf16Scalar(const uint8_t* const* rows, int64_t k_begin, int64_t kc, uint32_t* bt) {
  const auto& t = Bf16Table();
  const int64_t full = kc / 2;
  for (int64_t i = k_begin / 2; i < full; ++i) {
    for (int j = 0; j < kNr; ++j) {
      bt[i * kNr + j] = uint32_t(t[rows[j][2 * i]]) | (uint32_t(t[rows[j][2 * i + 1]]) << 16);
    }
  }
  if (kc % 2 != 0) {  // K's odd tail: the pair's second value is past K (zero; never read)
    for (int j = 0; j < kNr; ++j) bt[full * kNr + j] = t[rows[j][kc - 1]];
  }
}

#ifdef PYQUANT_BF16_KERNELS
// permutex2var indices of the 16 x 16 transpose's four stages (b = 8, 4, 2, 1): rows j and j + b
// (j & b == 0) swap their off-diagonal b x b blocks; [s][0] the new row j, [s][1] the new row j + b.
struct TransposeIndices {
  int32_t v[4][2][16];
};
constexpr TransposeIndices MakeTransposeIndices() {
  TransposeIndices t{};
  for (int s = 0; s < 4; ++s) {
    const int b = 8 >> s;
    for (int c = 0; c < 16; ++c) {
      t.v[s][0][c] = (c & b) ? 16 + c - b : c;
      t.v[s][1][c] = (c & b) ? 16 + c : c + b;
    }
  }
  return t;
}
alignas(64) constexpr TransposeIndices kTransposeIdx = MakeTransposeIndices();
// bf16 bits of the e4m3 subnormals m * 2^-9 (m = 0..7), for vpermw (32 entries, the rest unused).
alignas(64) constexpr uint16_t kSubnormalBf16[32] = {0x0000, 0x3B00, 0x3B80, 0x3BC0, 0x3C00, 0x3C20, 0x3C40, 0x3C60};

// 32 codes of each of the 16 rows per step: each row's codes -> 16 pair words in one zmm
// (arithmetic: normal codes (e, m) -> bf16 ((e << 3 | m) << 4) + (120 << 7), subnormals from a
// table, NaN codes -> a quiet NaN; the sign on top), then the 16 x 16 word transpose -> 16 panel
// rows. ~0.5 instructions per code against ~2.5 for the table lookups.
PYQUANT_TARGET_AVX512_BF16 void DecodeFp8PanelBf16Avx512(const uint8_t* const* rows, int64_t kc, uint32_t* bt) {
  const __m512i sub_lut = _mm512_load_si512(kSubnormalBf16);
  const __m512i m7f = _mm512_set1_epi16(0x7F), m80 = _mm512_set1_epi16(0x80);
  const __m512i bias = _mm512_set1_epi16(120 << 7), eight = _mm512_set1_epi16(8);
  const __m512i qnan = _mm512_set1_epi16(0x7FC0);
  __m512i idx[4][2];
  for (int s = 0; s < 4; ++s) {
    idx[s][0] = _mm512_load_si512(kTransposeIdx.v[s][0]);
    idx[s][1] = _mm512_load_si512(kTransposeIdx.v[s][1]);
  }
  const int64_t vec_end = kc / 32 * 32;
  for (int64_t k = 0; k < vec_end; k += 32) {
    __m512i r[16];
    for (int j = 0; j < kNr; ++j) {
      const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[j] + k)));
      const __m512i em = _mm512_and_si512(x, m7f);
      const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(x, m80), 8);
      __m512i v = _mm512_add_epi16(_mm512_slli_epi16(em, 4), bias);
      v = _mm512_mask_permutexvar_epi16(v, _mm512_cmplt_epu16_mask(em, eight), em, sub_lut);
      v = _mm512_mask_mov_epi16(v, _mm512_cmpeq_epi16_mask(em, m7f), qnan);
      r[j] = _mm512_or_si512(v, sign);
    }
    for (int s = 0; s < 4; ++s) {
      const int b = 8 >> s;
      for (int j = 0; j < kNr; ++j) {
        if (j & b) continue;
        const __m512i top = r[j], bot = r[j + b];
        r[j] = _mm512_permutex2var_epi32(top, idx[s][0], bot);
        r[j + b] = _mm512_permutex2var_epi32(top, idx[s][1], bot);
      }
    }
    for (int i = 0; i < kNr; ++i) _mm512_storeu_si512(bt + (k / 2 + i) * kNr, r[i]);
  }
  DecodeFp8PanelBf16Scalar(rows, vec_end, kc, bt);
}

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

#ifdef PYQUANT_BF16_KERNELS
// Seconds for `iters` x 12 independent 512-bit vdpbf16ps (bf16 = true: 32 multiply-adds each) or
// vfmadd231ps (16 each); the asm barrier keeps the loop from being folded.
PYQUANT_TARGET_AVX512_BF16 double TimeDotChains(bool bf16, int iters) {
  __m512 c[12];
  for (auto& v : c) v = _mm512_setzero_ps();
  __m512i a = _mm512_set1_epi32(0x3f803f80);  // bf16 pairs (1, 1)
  __m512 f = _mm512_set1_ps(1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  if (bf16) {
    for (int i = 0; i < iters; ++i) {
      for (auto& v : c) v = _mm512_dpbf16_ps(v, (__m512bh)a, (__m512bh)a);
      asm volatile("" : "+v"(a));
    }
  } else {
    for (int i = 0; i < iters; ++i) {
      for (auto& v : c) v = _mm512_fmadd_ps(f, f, v);
      asm volatile("" : "+v"(f));
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  __m512 s = c[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, c[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return std::chrono::duration<double>(t1 - t0).count();
}
#endif

// Whether this core's vdpbf16ps does multiply-adds at least kBf16MinGain times as fast as its FP32
// FMAs, measured once per process (~1 ms: the fastest of 5 interleaved timings of each). The bf16
// GEMM does the same multiply-adds as the float GEMM plus bf16 packing, so it only pays where the
// dot-product instruction is the faster way to them. Two cores with AVX512-BF16 disagree by 4x:
// the 2-core EPYC of session 45 (Zen 4: one 512-bit FMA per cycle, the bf16 GEMM 1.7-2.2x faster
// than the float one, bench/results/2026-11-28-cpu-s45-fp8-bf16-final-ops.md) and the Xeon of session
// 49 (AVX512-BF16 and -FP16: 0.74 ns per vdpbf16ps against 0.18 per FMA, two FMAs per cycle, a
// vdpbf16ps every ~2 cycles), where the bf16 GEMM took 1.6-1.7x the float GEMM's time on MiniLM's
// layers at M = 1024 (bench/results/2026-11-29-cpu-s49-fp8-bf16-probe.md).
// Call only where CpuHasAvx512Bf16() (the probe runs vdpbf16ps).
bool Bf16DotFasterThanFma() {
#ifdef PYQUANT_BF16_KERNELS
  static const bool faster = [] {
    constexpr int kIters = 4000;  // 48k instructions per timing
    constexpr double kBf16MinGain = 1.25;
    double bf16 = 1e30, fma = 1e30;
    for (int r = 0; r < 5; ++r) {
      bf16 = std::min(bf16, TimeDotChains(true, kIters));
      fma = std::min(fma, TimeDotChains(false, kIters));
    }
    // multiply-adds per second: 32 per vdpbf16ps, 16 per FMA
    return 32.0 / bf16 >= kBf16MinGain * 16.0 / fma;
  }();
  return faster;
#else
  return false;
#endif
}

}  // namespace

bool Fp8Bf16GemmAvailable() {
  const char* v = std::getenv("PYQUANT_CPU_FP8_BF16");
  if (v != nullptr && std::strcmp(v, "0") == 0) return false;
  if (CpuIsa() != CpuIsaLevel::kAvx512 || !CpuHasAvx512Bf16()) return false;
  return (v != nullptr && std::strcmp(v, "1") == 0) || Bf16DotFasterThanFma();
}

void DecodeFp8PanelBf16(const uint8_t* const* rows, int64_t kc, uint32_t* bt) {
#ifdef PYQUANT_BF16_KERNELS
  DecodeFp8PanelBf16Avx512(rows, kc, bt);  // only called where Fp8Bf16GemmAvailable()
#else
  DecodeFp8PanelBf16Scalar(rows, 0, kc, bt);
#endif
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
