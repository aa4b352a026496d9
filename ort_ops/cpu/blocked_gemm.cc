#include "cpu/blocked_gemm.h"

#include "common/dtypes.h"
#include "ops/linear_fp8.h"

// The V16 helpers below are always inlined into ISA-specific functions; the ABI note GCC gives for
// their by-value vector returns in the baseline instantiation does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace pyquant {

// ISA dispatch. The kernels are written once as always-inline templates and instantiated inside
// functions compiled for AVX-512 / AVX2+FMA / the baseline; a resolver picks one at load time from
// the CPU's *features*. (GCC's target_clones("arch=...") resolves with __builtin_cpu_is, i.e. by CPU
// model name, so on any CPU newer than the listed models -- Sapphire Rapids, Zen 4, most cloud
// VMs -- it silently ran the SSE2 clone, 10-30x slower.)
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PYQUANT_X86_DISPATCH 1
#define PYQUANT_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")))
#define PYQUANT_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

#define PYQUANT_INLINE __attribute__((always_inline)) inline

namespace {

// One panel row (kNr floats) as a GCC/Clang vector: one zmm under AVX-512, two ymm under AVX2,
// four xmm otherwise. Written with vectors rather than scalar loops because GCC's loop vectorizer
// otherwise vectorizes the k loop with permutes instead of keeping a row in a register.
typedef float V16 __attribute__((vector_size(kNr * sizeof(float))));
typedef int32_t V16i __attribute__((vector_size(kNr * sizeof(int32_t))));
static_assert(kNr == 16, "V16 holds one panel row");

// The micro-kernels hold a panel row as kParts<VT> vectors of the ISA's own width: VT = V16 (one
// zmm) under AVX-512, V8 (ymm) under AVX2, V4 (xmm / NEON) otherwise. A V16 under AVX2 is no
// register type: GCC kept such accumulators on the stack and moved them through general registers
// at every k (AVX2 micro-kernel 5.6 GFLOP/s on an AMD EPYC core, slower than the SSE2 build).
typedef float V8 __attribute__((vector_size(8 * sizeof(float))));
typedef float V4 __attribute__((vector_size(4 * sizeof(float))));
typedef int32_t V8i __attribute__((vector_size(8 * sizeof(int32_t))));
typedef int32_t V4i __attribute__((vector_size(4 * sizeof(int32_t))));
template <typename VT>  // the int32 vector of VT's width (the INT4 decoder's codes)
using IntVecOf =
    std::conditional_t<sizeof(VT) == sizeof(V16), V16i, std::conditional_t<sizeof(VT) == sizeof(V8), V8i, V4i>>;
template <typename VT>
constexpr int kLanes = sizeof(VT) / sizeof(float);
template <typename VT>
constexpr int kParts = kNr / kLanes<VT>;

template <typename VT>
PYQUANT_INLINE VT LoadVec(const float* p) {
  VT v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}
template <typename VT>
PYQUANT_INLINE void StoreVec(float* p, VT v) {
  __builtin_memcpy(p, &v, sizeof(v));
}

// add: start from acc's sums (later K chunks), else from zero (the first: acc is not read).
template <typename VT, int R>
PYQUANT_INLINE void MicroKernelRows(const float* __restrict a, int64_t lda, const float* __restrict bt, int64_t kc,
                                    float* __restrict acc, bool add) {
  constexpr int P = kParts<VT>, L = kLanes<VT>;
  VT c[R][P];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < P; ++q) c[r][q] = add ? LoadVec<VT>(acc + r * kNr + q * L) : VT{};
  for (int64_t k = 0; k < kc; ++k) {
    VT b[P];
    for (int q = 0; q < P; ++q) b[q] = LoadVec<VT>(bt + k * kNr + q * L);
    for (int r = 0; r < R; ++r) {
      const float av = a[r * lda + k];
      for (int q = 0; q < P; ++q) c[r][q] += av * b[q];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < P; ++q) StoreVec<VT>(acc + r * kNr + q * L, c[r][q]);
}

// Two panels side by side (32 output columns): each broadcast A element feeds two FMAs, so a k step
// is 2 panel loads + R broadcasts for 2R FMAs, instead of 1 + R loads for R FMAs -- the 8 x 16
// tile was bound by the load ports (9 loads per 8 FMAs), this one by the FMA ports.
template <int R>  // AVX-512 only (V16 = one zmm)
PYQUANT_INLINE void MicroKernelRows2(const float* __restrict a, int64_t lda, const float* __restrict bt0,
                                     const float* __restrict bt1, int64_t kc, float* __restrict acc0,
                                     float* __restrict acc1, bool add) {
  V16 c0[R], c1[R];
  for (int r = 0; r < R; ++r) {
    c0[r] = add ? LoadVec<V16>(acc0 + r * kNr) : V16{};
    c1[r] = add ? LoadVec<V16>(acc1 + r * kNr) : V16{};
  }
  for (int64_t k = 0; k < kc; ++k) {
    const V16 b0 = LoadVec<V16>(bt0 + k * kNr);
    const V16 b1 = LoadVec<V16>(bt1 + k * kNr);
    for (int r = 0; r < R; ++r) {
      const float av = a[r * lda + k];
      c0[r] += av * b0;
      c1[r] += av * b1;
    }
  }
  for (int r = 0; r < R; ++r) {
    StoreVec<V16>(acc0 + r * kNr, c0[r]);
    StoreVec<V16>(acc1 + r * kNr, c1[r]);
  }
}

// AVX-512 only: 2 x 8 zmm accumulators + 2 panel rows + a broadcast fit the 32 registers.
PYQUANT_INLINE void MicroKernel2Body(const float* a, int64_t lda, int rows, const float* bt0, const float* bt1,
                                     int64_t kc, float* acc0, float* acc1, bool add) {
  while (rows > 0) {
    const int r = std::min(rows, 8);
    switch (r) {
      case 8: MicroKernelRows2<8>(a, lda, bt0, bt1, kc, acc0, acc1, add); break;
      case 7: MicroKernelRows2<7>(a, lda, bt0, bt1, kc, acc0, acc1, add); break;
      case 6: MicroKernelRows2<6>(a, lda, bt0, bt1, kc, acc0, acc1, add); break;
      case 5: MicroKernelRows2<5>(a, lda, bt0, bt1, kc, acc0, acc1, add); break;
      case 4: MicroKernelRows2<4>(a, lda, bt0, bt1, kc, acc0, acc1, add); break;
      case 3: MicroKernelRows2<3>(a, lda, bt0, bt1, kc, acc0, acc1, add); break;
      case 2: MicroKernelRows2<2>(a, lda, bt0, bt1, kc, acc0, acc1, add); break;
      default: MicroKernelRows2<1>(a, lda, bt0, bt1, kc, acc0, acc1, add); break;
    }
    a += r * lda;
    acc0 += r * kNr;
    acc1 += r * kNr;
    rows -= r;
  }
}

// kMaxR rows per register tile: 8 on AVX-512 (8 zmm accumulators hide the FMA latency), 4 where a
// row takes two vectors (AVX2: 8 ymm accumulators; more would spill).
template <typename VT, int kMaxR>
PYQUANT_INLINE void MicroKernelBody(const float* a, int64_t lda, int rows, const float* bt, int64_t kc, float* acc,
                                    bool add) {
  while (rows > 0) {
    const int r = std::min(rows, kMaxR);
    switch (r) {
      case 8: MicroKernelRows<VT, 8>(a, lda, bt, kc, acc, add); break;
      case 7: MicroKernelRows<VT, 7>(a, lda, bt, kc, acc, add); break;
      case 6: MicroKernelRows<VT, 6>(a, lda, bt, kc, acc, add); break;
      case 5: MicroKernelRows<VT, 5>(a, lda, bt, kc, acc, add); break;
      case 4: MicroKernelRows<VT, 4>(a, lda, bt, kc, acc, add); break;
      case 3: MicroKernelRows<VT, 3>(a, lda, bt, kc, acc, add); break;
      case 2: MicroKernelRows<VT, 2>(a, lda, bt, kc, acc, add); break;
      default: MicroKernelRows<VT, 1>(a, lda, bt, kc, acc, add); break;
    }
    a += r * lda;
    acc += r * kNr;
    rows -= r;
  }
}

// The portable INT4 decoder (x86 hosts with AVX2 run DecodeInt4Avx2 below). Each step reads one
// byte (two codes) from each of the kNr rows and writes two panel rows; the arithmetic runs across
// the kNr columns, in kParts<VT> vectors of the ISA's width, as in the micro-kernels.
template <typename VT>
PYQUANT_INLINE void DecodeInt4Body(const uint8_t* const* rows_in, const float* scale, const float* zp,
                                   int64_t block_size, int64_t kc, float* __restrict bt) {
  constexpr int P = kParts<VT>, L = kLanes<VT>;
  using VTi = IntVecOf<VT>;
  const uint8_t* rows[kNr];
  for (int j = 0; j < kNr; ++j) rows[j] = rows_in[j];
  for (int64_t kb = 0, blk = 0; kb < kc; kb += block_size, ++blk) {
    VT s[P], z[P];
    for (int q = 0; q < P; ++q) {
      s[q] = LoadVec<VT>(scale + blk * kNr + q * L);
      z[q] = LoadVec<VT>(zp + blk * kNr + q * L);
    }
    const int64_t pairs = (std::min(block_size, kc - kb) + 1) / 2;
    const int64_t byte0 = kb / 2;
    for (int64_t i = 0; i < pairs; ++i) {
      float* o0 = bt + (kb + 2 * i) * kNr;
      for (int q = 0; q < P; ++q) {
        VTi by;
        for (int j = 0; j < L; ++j) by[j] = rows[q * L + j][byte0 + i];
        // (q - zp) is exact; one rounding in the multiply (docs/ops.md).
        StoreVec<VT>(o0 + q * L, (__builtin_convertvector(by & 0xF, VT) - z[q]) * s[q]);
        StoreVec<VT>(o0 + kNr + q * L, (__builtin_convertvector(by >> 4, VT) - z[q]) * s[q]);
      }
    }
  }
}

// The portable FP8 decoder (x86 hosts with AVX2 run DecodeFp8Avx2 below): a table load per code.
template <typename VT>
PYQUANT_INLINE void DecodeFp8Body(const uint8_t* const* rows_in, const float* table, const float* scale,
                                  int64_t scale_block, int64_t kc, float* __restrict bt) {
  constexpr int P = kParts<VT>, L = kLanes<VT>;
  const uint8_t* rows[kNr];
  for (int j = 0; j < kNr; ++j) rows[j] = rows_in[j];
  for (int64_t kb = 0, blk = 0; kb < kc; kb += scale_block, ++blk) {
    VT s[P];
    for (int q = 0; q < P; ++q) s[q] = LoadVec<VT>(scale + blk * kNr + q * L);
    const int64_t len = std::min(scale_block, kc - kb);
    for (int64_t i = kb; i < kb + len; ++i) {
      for (int q = 0; q < P; ++q) {
        VT w;
        for (int j = 0; j < L; ++j) w[j] = table[rows[q * L + j][i]];
        StoreVec<VT>(bt + i * kNr + q * L, w * s[q]);
      }
    }
  }
}

// The two loops are branch-free so that they vectorize. amax runs on the bit patterns (ordered like
// the values for non-negative floats); a NaN pattern (above infinity's) counts as 0, as std::fmax
// would skip it.
PYQUANT_INLINE float QuantizeFp8RowBody(float* __restrict row, int64_t k, bool dynamic, float inv, float s_x,
                                        float mul) {
  if (dynamic) {
    // 16 running maxima (one panel row of lanes), so that GCC vectorizes the reduction.
    uint32_t lane_max[kNr] = {};
    int64_t i = 0;
    for (; i + kNr <= k; i += kNr) {
      for (int j = 0; j < kNr; ++j) {
        const uint32_t b = FloatToBits(row[i + j]) & 0x7FFFFFFFu;
        const uint32_t v = b & (0u - static_cast<uint32_t>(b <= 0x7F800000u));
        lane_max[j] = std::max(lane_max[j], v);
      }
    }
    for (; i < k; ++i) {
      const uint32_t b = FloatToBits(row[i]) & 0x7FFFFFFFu;
      lane_max[0] = std::max(lane_max[0], b & (0u - static_cast<uint32_t>(b <= 0x7F800000u)));
    }
    uint32_t amax = 0;
    for (int j = 0; j < kNr; ++j) amax = std::max(amax, lane_max[j]);
    const Fp8RowScale rs = DynamicFp8RowScale(BitsToFloat(amax));
    inv = rs.inv;
    s_x = rs.s_x;
  }
  for (int64_t i = 0; i < k; ++i) row[i] = Fp8E4M3RoundSat(row[i] * inv) * mul;
  return s_x;
}

using MicroKernelFn = void (*)(const float*, int64_t, int, const float*, int64_t, float*, bool);
using MicroKernel2Fn = void (*)(const float*, int64_t, int, const float*, const float*, int64_t, float*, float*, bool);
using DecodeInt4Fn = void (*)(const uint8_t* const*, const float*, const float*, int64_t, int64_t, float*);
using DecodeFp8Fn = void (*)(const uint8_t* const*, const float*, const float*, int64_t, int64_t, float*);
using QuantizeFp8RowFn = float (*)(float*, int64_t, bool, float, float, float);

#define PYQUANT_DEFINE_MICRO_KERNEL(SUFFIX, ATTR, VT, MAX_R)                                                    \
  ATTR void MicroKernel##SUFFIX(const float* a, int64_t lda, int rows, const float* bt, int64_t kc, float* acc, \
                                bool add) {                                                                     \
    MicroKernelBody<VT, MAX_R>(a, lda, rows, bt, kc, acc, add);                                                 \
  }

#define PYQUANT_DEFINE_FP8_QUANTIZER(SUFFIX, ATTR)                                                          \
  ATTR float QuantizeFp8Row##SUFFIX(float* row, int64_t k, bool dynamic, float inv, float s_x, float mul) { \
    return QuantizeFp8RowBody(row, k, dynamic, inv, s_x, mul);                                              \
  }

#define PYQUANT_DEFINE_KERNEL2_PAIR(SUFFIX, ATTR, VT, MAX_R)                                                \
  ATTR void MicroKernel2##SUFFIX(const float* a, int64_t lda, int rows, const float* bt0, const float* bt1, \
                                 int64_t kc, float* acc0, float* acc1, bool add) {                          \
    MicroKernelBody<VT, MAX_R>(a, lda, rows, bt0, kc, acc0, add);                                           \
    MicroKernelBody<VT, MAX_R>(a, lda, rows, bt1, kc, acc1, add);                                           \
  }

PYQUANT_DEFINE_MICRO_KERNEL(Base, , V4, 4)
void DecodeInt4Base(const uint8_t* const* rows, const float* scale, const float* zp, int64_t bs, int64_t kc,
                    float* bt) {
  DecodeInt4Body<V4>(rows, scale, zp, bs, kc, bt);
}
void DecodeFp8Base(const uint8_t* const* rows, const float* table, const float* scale, int64_t sb, int64_t kc,
                   float* bt) {
  DecodeFp8Body<V4>(rows, table, scale, sb, kc, bt);
}
PYQUANT_DEFINE_FP8_QUANTIZER(Base, )
PYQUANT_DEFINE_KERNEL2_PAIR(Base, , V4, 4)
#ifdef PYQUANT_X86_DISPATCH
PYQUANT_DEFINE_MICRO_KERNEL(Avx2, PYQUANT_TARGET_AVX2, V8, 6)
PYQUANT_DEFINE_MICRO_KERNEL(Avx512, PYQUANT_TARGET_AVX512, V16, 8)
PYQUANT_DEFINE_FP8_QUANTIZER(Avx2, PYQUANT_TARGET_AVX2)
PYQUANT_DEFINE_FP8_QUANTIZER(Avx512, PYQUANT_TARGET_AVX512)
PYQUANT_DEFINE_KERNEL2_PAIR(Avx2, PYQUANT_TARGET_AVX2, V8, 6)  // 16 ymm: two single-panel passes
PYQUANT_TARGET_AVX512 void MicroKernel2Avx512(const float* a, int64_t lda, int rows, const float* bt0, const float* bt1,
                                              int64_t kc, float* acc0, float* acc1, bool add) {
  MicroKernel2Body(a, lda, rows, bt0, bt1, kc, acc0, acc1, add);
}

// AVX2 FP8 panel decoder, also the AVX-512 build's. The gather decoder (DecodeFp8Body) assembles
// each panel row from 16 single-byte loads and 16 table loads; AVX2 has no cheap byte gather (and
// vpgatherdd is slow on AMD cores). On an AVX-512 Xeon (Sapphire Rapids class, session 50) this
// decoder made LinearFp8 at M = 1024, K x N = 384 x 1536, one thread, 4-5 % faster than the gather
// decoder in 16-wide vectors (9.45 -> 9.02 ms, three alternating runs each). This one reads 8 consecutive codes of 8 weight rows (8 x 8 bytes, one load each),
// turns them into fp16 bit patterns, transposes the 8 x 8 block of 16-bit values in xmm registers
// and widens each panel row with F16C. e4m3 -> fp16 is a shift: e4m3 s.eeee.mmm (bias 7) placed
// as fp16 s.0eeee.mmm0000000 (bias 15) is the value times 2^-8, subnormal codes included (they
// become fp16 subnormals, which vcvtph2ps widens exactly whatever MXCSR's DAZ says). The two
// multiplies by 256 and by the scale are exact and one rounding, the table decoder's rounding:
// bit-identical output. The NaN codes 0x7F / 0xFF are set to an fp16 NaN.
PYQUANT_TARGET_AVX2 PYQUANT_INLINE __m128i Fp8CodesToHalfBits(const uint8_t* p) {
  const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7F));
  const __m128i sign = _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8);
  const __m128i nan = _mm_and_si128(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F)), _mm_set1_epi16(0x7E00));
  return _mm_or_si128(_mm_or_si128(sign, _mm_slli_epi16(mag, 7)), nan);
}

// bt[i .. i + 7][col0 .. col0 + 7] from rows[0..7][i .. i + 7], times 256 * s (s: the 8 columns' scales).
PYQUANT_TARGET_AVX2 PYQUANT_INLINE void DecodeFp8Block8x8(const uint8_t* const* rows, int64_t i, __m256 s, float* bt) {
  __m128i r[8];
  for (int j = 0; j < 8; ++j) r[j] = Fp8CodesToHalfBits(rows[j] + i);
  // 8 x 8 transpose of 16-bit lanes: rows j -> columns kk.
  const __m128i a0 = _mm_unpacklo_epi16(r[0], r[1]), a1 = _mm_unpackhi_epi16(r[0], r[1]);
  const __m128i a2 = _mm_unpacklo_epi16(r[2], r[3]), a3 = _mm_unpackhi_epi16(r[2], r[3]);
  const __m128i a4 = _mm_unpacklo_epi16(r[4], r[5]), a5 = _mm_unpackhi_epi16(r[4], r[5]);
  const __m128i a6 = _mm_unpacklo_epi16(r[6], r[7]), a7 = _mm_unpackhi_epi16(r[6], r[7]);
  const __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
  const __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
  const __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
  const __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
  const __m128i t[8] = {_mm_unpacklo_epi64(b0, b4), _mm_unpackhi_epi64(b0, b4), _mm_unpacklo_epi64(b1, b5),
                        _mm_unpackhi_epi64(b1, b5), _mm_unpacklo_epi64(b2, b6), _mm_unpackhi_epi64(b2, b6),
                        _mm_unpacklo_epi64(b3, b7), _mm_unpackhi_epi64(b3, b7)};
  const __m256 k256 = _mm256_set1_ps(256.0f);
  for (int kk = 0; kk < 8; ++kk) {
    _mm256_storeu_ps(bt + (i + kk) * kNr, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(t[kk]), k256), s));
  }
}

// AVX2 INT4 panel decoder, also the AVX-512 build's. The portable one (DecodeInt4Body) builds each
// byte column of the panel (one byte of each of the 16 weight rows) from 16 single-byte loads.
// This one loads 16 bytes (32 codes) of each row, transposes the 16 x 16 bytes in xmm registers so
// that vector c holds byte c of every row, and widens each byte column into the panel's two rows
// (low nibbles: code k, high: k + 1), with the same (q - zp) * s arithmetic: bit-identical. The
// last (kc + 1) / 2 % 16 bytes of a chunk take a scalar loop. Sapphire-Rapids-class Xeon, one
// thread, MatMulInt4 (session 50, notes s50): 2-4 % faster at M = 1024 with block 128, 6-12 % with
// block 32, ~10 % at M = 64.
PYQUANT_TARGET_AVX2 PYQUANT_INLINE void Transpose16x16Bytes(__m128i r[16]) {
  __m128i a[16], b[16], c[16];
  for (int p = 0; p < 8; ++p) {  // 16-bit units: (row 2p, row 2p + 1) of columns 0-7 / 8-15
    a[2 * p] = _mm_unpacklo_epi8(r[2 * p], r[2 * p + 1]);
    a[2 * p + 1] = _mm_unpackhi_epi8(r[2 * p], r[2 * p + 1]);
  }
  for (int q = 0; q < 4; ++q) {  // 32-bit units: rows 4q .. 4q + 3 of columns 0-3 / 4-7 / 8-11 / 12-15
    b[4 * q + 0] = _mm_unpacklo_epi16(a[4 * q + 0], a[4 * q + 2]);
    b[4 * q + 1] = _mm_unpackhi_epi16(a[4 * q + 0], a[4 * q + 2]);
    b[4 * q + 2] = _mm_unpacklo_epi16(a[4 * q + 1], a[4 * q + 3]);
    b[4 * q + 3] = _mm_unpackhi_epi16(a[4 * q + 1], a[4 * q + 3]);
  }
  for (int h = 0; h < 2; ++h) {  // 64-bit units: rows 8h .. 8h + 7 of columns (4g, 4g + 1) / (4g + 2, 4g + 3)
    for (int g = 0; g < 4; ++g) {
      c[8 * h + 2 * g] = _mm_unpacklo_epi32(b[8 * h + g], b[8 * h + 4 + g]);
      c[8 * h + 2 * g + 1] = _mm_unpackhi_epi32(b[8 * h + g], b[8 * h + 4 + g]);
    }
  }
  for (int g = 0; g < 8; ++g) {  // whole columns: 2g, 2g + 1
    r[2 * g] = _mm_unpacklo_epi64(c[g], c[8 + g]);
    r[2 * g + 1] = _mm_unpackhi_epi64(c[g], c[8 + g]);
  }
}

PYQUANT_TARGET_AVX2 void DecodeInt4Avx2(const uint8_t* const* rows, const float* scale, const float* zp,
                                        int64_t block_size, int64_t kc, float* __restrict bt) {
  const int64_t bytes = (kc + 1) / 2;
  const int bs_log2 = __builtin_ctzll(static_cast<unsigned long long>(block_size));  // a power of two
  const __m256i low = _mm256_set1_epi32(0xF);
  int64_t i = 0;
  for (; i + 16 <= bytes; i += 16) {
    __m128i col[16];
    for (int j = 0; j < kNr; ++j) col[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j] + i));
    Transpose16x16Bytes(col);
    for (int cb = 0; cb < 16; ++cb) {
      const int64_t k = 2 * (i + cb);
      const int64_t blk = k >> bs_log2;
      const __m256 s0 = _mm256_loadu_ps(scale + blk * kNr), s1 = _mm256_loadu_ps(scale + blk * kNr + 8);
      const __m256 z0 = _mm256_loadu_ps(zp + blk * kNr), z1 = _mm256_loadu_ps(zp + blk * kNr + 8);
      const __m256i by0 = _mm256_cvtepu8_epi32(col[cb]);                     // rows 0-7
      const __m256i by1 = _mm256_cvtepu8_epi32(_mm_srli_si128(col[cb], 8));  // rows 8-15
      float* o = bt + k * kNr;
      _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(by0, low)), z0), s0));
      _mm256_storeu_ps(o + 8, _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(by1, low)), z1), s1));
      _mm256_storeu_ps(o + kNr, _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(by0, 4)), z0), s0));
      _mm256_storeu_ps(o + kNr + 8,
                       _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(by1, 4)), z1), s1));
    }
  }
  for (; i < bytes; ++i) {  // the chunk's last bytes
    const int64_t k = 2 * i;
    const int64_t blk = k >> bs_log2;
    for (int j = 0; j < kNr; ++j) {
      const int by = rows[j][i];
      const float s = scale[blk * kNr + j], z = zp[blk * kNr + j];
      bt[k * kNr + j] = (static_cast<float>(by & 0xF) - z) * s;
      bt[(k + 1) * kNr + j] = (static_cast<float>(by >> 4) - z) * s;
    }
  }
}

PYQUANT_TARGET_AVX2 void DecodeFp8Avx2(const uint8_t* const* rows, const float* table, const float* scale,
                                       int64_t scale_block, int64_t kc, float* __restrict bt) {
  // Scale blocks are powers of two >= 16 (or one block per chunk), so 8-code groups never straddle one.
  for (int64_t kb = 0, blk = 0; kb < kc; kb += scale_block, ++blk) {
    const int64_t end = std::min(kc, kb + scale_block);
    const __m256 s0 = _mm256_loadu_ps(scale + blk * kNr), s1 = _mm256_loadu_ps(scale + blk * kNr + 8);
    int64_t i = kb;
    for (; i + 8 <= end; i += 8) {
      DecodeFp8Block8x8(rows, i, s0, bt);
      DecodeFp8Block8x8(rows + 8, i, s1, bt + 8);
    }
    for (; i < end; ++i) {  // K's tail, fewer than 8 codes
      for (int j = 0; j < kNr; ++j) bt[i * kNr + j] = table[rows[j][i]] * scale[blk * kNr + j];
    }
  }
}
#endif

struct Kernels {
  MicroKernelFn micro;
  MicroKernel2Fn micro2;
  DecodeInt4Fn int4;
  DecodeFp8Fn fp8;
  QuantizeFp8RowFn quantize_fp8;
};

CpuIsaLevel PickIsa() {
#ifdef PYQUANT_X86_DISPATCH
  const char* cap = std::getenv("PYQUANT_CPU_ISA");
  const std::string want = cap ? cap : "";
  if (want == "base") return CpuIsaLevel::kBase;
  __builtin_cpu_init();
  if (want != "avx2" && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq")) {
    return CpuIsaLevel::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return CpuIsaLevel::kAvx2;
  }
#endif
  return CpuIsaLevel::kBase;
}

Kernels PickKernels() {
  switch (CpuIsa()) {
#ifdef PYQUANT_X86_DISPATCH
    case CpuIsaLevel::kAvx512:
      return {MicroKernelAvx512, MicroKernel2Avx512, DecodeInt4Avx2, DecodeFp8Avx2, QuantizeFp8RowAvx512};
    case CpuIsaLevel::kAvx2:
      return {MicroKernelAvx2, MicroKernel2Avx2, DecodeInt4Avx2, DecodeFp8Avx2, QuantizeFp8RowAvx2};
#endif
    default: return {MicroKernelBase, MicroKernel2Base, DecodeInt4Base, DecodeFp8Base, QuantizeFp8RowBase};
  }
}

const Kernels& K() {
  static const Kernels k = PickKernels();
  return k;
}

}  // namespace

CpuIsaLevel CpuIsa() {
  static const CpuIsaLevel isa = PickIsa();
  return isa;
}

void MicroKernel(const float* a, int64_t lda, int rows, const float* bt, int64_t kc, float* acc, bool add) {
  K().micro(a, lda, rows, bt, kc, acc, add);
}

void MicroKernel2(const float* a, int64_t lda, int rows, const float* bt0, const float* bt1, int64_t kc, float* acc0,
                  float* acc1, bool add) {
  K().micro2(a, lda, rows, bt0, bt1, kc, acc0, acc1, add);
}

void DecodeInt4Panel(const uint8_t* const* rows, const float* scale, const float* zp, int64_t block_size, int64_t kc,
                     float* bt) {
  K().int4(rows, scale, zp, block_size, kc, bt);
}

void DecodeFp8Panel(const uint8_t* const* rows, const float* table, const float* scale, int64_t scale_block, int64_t kc,
                    float* bt) {
  K().fp8(rows, table, scale, scale_block, kc, bt);
}

float QuantizeFp8Row(float* row, int64_t k, bool dynamic, float inv, float s_x, float mul) {
  return K().quantize_fp8(row, k, dynamic, inv, s_x, mul);
}

}  // namespace pyquant
