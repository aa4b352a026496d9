// AVX2 kernel of the int8-activation MatMulInt4 (cpu/int8_activations.h). Compiled for
// "avx2,fma,f16c" in this translation unit only; Int4Int8Rows calls it on CPUs that have AVX2.
//
// One 32-byte chunk of a packed weight row holds 64 codes: byte j has code 2j in its low nibble and
// 2j + 1 in its high one, and meets byte j of the even / odd halves of X's int8 row. Per chunk:
//   lo = raw & 15, hi = (raw >> 4) & 15                                 (unsigned bytes 0..15)
//   vpmaddubsw(lo, xe) + vpmaddubsw(hi, xo)                              (16-bit pair sums)
//   vpmaddwd(., 1)                                                       (8 int32 lanes)
// vpmaddubsw takes unsigned x signed bytes, which the codes and X are, so the zero point is left
// out of the products and subtracted once per block as zp * sum(xq) (int32: the dot stays exact).
// A pair sum is at most 2 * 15 * 127 = 3810 and the two added 7620, far from int16 saturation.
// Lane l of the result holds codes 8l .. 8l + 7 of the chunk. Blocks of >= 64 codes span whole
// chunks: their lanes add up in int32 and meet the block's float32(scale * s_x) once. Blocks of
// 16 / 32 codes share a chunk: each lane is scaled by its own block's factor.
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

inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline void DecodeChunk(__m256i raw, __m256i& lo, __m256i& hi) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  lo = _mm256_and_si256(raw, mask);
  hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
}

inline __m256i DotChunk(__m256i lo, __m256i hi, const int8_t* xe, const int8_t* xo) {
  const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xe));
  const __m256i o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xo));
  const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, e), _mm256_maddubs_epi16(hi, o));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

struct RowView {
  const Int4Int8Params* p;
  int64_t nb, half, row_bytes, zp_row_bytes;
  int zp(int64_t n, int64_t blk) const {
    return p->zp ? Int4ZeroPointAt(p->zp + n * zp_row_bytes, blk) : kInt4SymmetricZeroPoint;
  }
};

// Blocks of >= 64 codes: NR weight rows x R rows of X, every decoded chunk used R times.
template <class ST, int NR, int R>
void TileWide(const RowView& v, int64_t n, int64_t m0, float* y, int64_t ldy) {
  const Int8Activations& x = *v.p->x;
  const ST* scales = static_cast<const ST*>(v.p->scales);
  const uint8_t* brow[NR];
  for (int r = 0; r < NR; ++r) brow[r] = v.p->b + (n + r) * v.row_bytes;
  const int8_t* xe[R];
  const int8_t* xo[R];
  for (int i = 0; i < R; ++i) {
    xe[i] = x.even() + (m0 + i) * x.stride;
    xo[i] = x.odd() + (m0 + i) * x.stride;
  }
  __m256 facc[NR][R];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < R; ++i) facc[r][i] = _mm256_setzero_ps();
  for (int64_t blk = 0; blk < v.nb; ++blk) {
    __m256i isum[NR][R];
    for (int r = 0; r < NR; ++r) {
      // lane 0 starts at -zp * sum(xq): the lanes then add up to the block's exact dot
      const int zp = v.zp(n + r, blk);
      for (int i = 0; i < R; ++i)
        isum[r][i] = _mm256_setr_epi32(-zp * x.sums[(m0 + i) * v.nb + blk], 0, 0, 0, 0, 0, 0, 0);
    }
    for (int64_t c = blk * v.half; c < (blk + 1) * v.half; c += 32) {
      for (int r = 0; r < NR; ++r) {
        // The next tile's rows, a line at a time: a tile reads NR short rows side by side, which the
        // hardware prefetcher picks up late (the float path found the same, cpu/gemv_kernels.inc).
        if ((c & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(brow[r] + NR * v.row_bytes + c), _MM_HINT_T0);
        __m256i lo, hi;
        DecodeChunk(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(brow[r] + c)), lo, hi);
        for (int i = 0; i < R; ++i) isum[r][i] = _mm256_add_epi32(isum[r][i], DotChunk(lo, hi, xe[i] + c, xo[i] + c));
      }
    }
    for (int r = 0; r < NR; ++r) {
      const float sw = ToFloat(scales[(n + r) * v.nb + blk]);
      for (int i = 0; i < R; ++i) {
        const __m256 s = _mm256_set1_ps(sw * x.scales[(m0 + i) * v.nb + blk]);
        facc[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][i]), s, facc[r][i]);
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < R; ++i) y[(m0 + i) * ldy + r] = HSum(facc[r][i]);
}

// The per-lane factors of a chunk that spans G = 64 / block_size blocks (G = 2: lanes 0-3 / 4-7;
// G = 4: lane pairs), from G per-block values; blocks past the row's last are 0.
template <int G>
__m256 LaneFactors(const float (&f)[G]) {
  if constexpr (G == 2) return _mm256_set_m128(_mm_set1_ps(f[1]), _mm_set1_ps(f[0]));
  return _mm256_setr_ps(f[0], f[0], f[1], f[1], f[2], f[2], f[3], f[3]);
}
// The G scales at p (G consecutive blocks of one weight row) as float32: exact conversions (F16C for
// fp16, a shift for bf16).
template <class ST, int G>
__m128 LoadScales(const ST* p) {
  if constexpr (std::is_same_v<ST, float>) {
    if constexpr (G == 2) return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(p)));
    return _mm_loadu_ps(p);
  } else {
    const __m128i raw = G == 2 ? _mm_cvtsi32_si128(*reinterpret_cast<const int*>(p))
                               : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    if constexpr (std::is_same_v<ST, Half>) return _mm_cvtph_ps(raw);
    return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), raw));  // bf16: the high half
  }
}

// Zero points as lanes: each block's in its first lane (the lanes where lane_sums are nonzero).
template <int G>
__m256i LaneZeroPoints(const int (&z)[G]) {
  if constexpr (G == 2) return _mm256_setr_epi32(z[0], 0, 0, 0, z[1], 0, 0, 0);
  return _mm256_setr_epi32(z[0], 0, z[1], 0, z[2], 0, z[3], 0);
}

// Blocks of 16 (G = 4) or 32 (G = 2) codes: every chunk covers G blocks; the row's last chunk may
// cover fewer (then it is read through a zero-padded copy: B has no padding past a row).
template <class ST, int G, bool kSym, int NR, int R>
void TileNarrow(const RowView& v, int64_t n, int64_t m0, float* y, int64_t ldy) {
  const Int8Activations& x = *v.p->x;
  const ST* scales = static_cast<const ST*>(v.p->scales);
  __m256 facc[NR][R];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < R; ++i) facc[r][i] = _mm256_setzero_ps();
  const int64_t chunks = x.stride / 32;
  for (int64_t c = 0; c < v.row_bytes; c += 32) {
    const int64_t blk0 = c / v.half;
    __m256i lo[NR], hi[NR], zpv[NR];
    __m256 swv[NR];
    for (int r = 0; r < NR; ++r) {
      const uint8_t* src = v.p->b + (n + r) * v.row_bytes + c;
      // As in TileWide: the next tile's rows, and here their scales too (4 bytes per 16 bytes of
      // codes at block 32: a stream of its own that the loads below otherwise wait for).
      if ((c & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(src + NR * v.row_bytes), _MM_HINT_T0);
      if ((blk0 * static_cast<int64_t>(sizeof(ST))) % 64 == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(scales + (n + r + NR) * v.nb + blk0), _MM_HINT_T0);
      }
      alignas(32) uint8_t tail[32];
      if (c + 32 > v.row_bytes) {
        std::memset(tail, 0, sizeof(tail));
        std::memcpy(tail, src, static_cast<size_t>(v.row_bytes - c));
        src = tail;
      }
      DecodeChunk(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)), lo[r], hi[r]);
      const ST* srow = scales + (n + r) * v.nb + blk0;
      if (blk0 + G <= v.nb) {  // lane l gets block l / (8 / G): G = 2: 0000 1111, G = 4: 00 11 22 33
        const __m256i spread =
            G == 2 ? _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1) : _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
        swv[r] = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(LoadScales<ST, G>(srow)), spread);
      } else {  // the row's last chunk, past its last block
        float sw[G];
        for (int g = 0; g < G; ++g) sw[g] = blk0 + g < v.nb ? ToFloat(srow[g]) : 0.0f;
        swv[r] = LaneFactors<G>(sw);
      }
      if constexpr (!kSym) {
        int zp[G];
        for (int g = 0; g < G; ++g) zp[g] = blk0 + g < v.nb ? v.zp(n + r, blk0 + g) : 0;
        zpv[r] = LaneZeroPoints<G>(zp);
      }
    }
    const int64_t lane_off = (c / 32) * 8;
    for (int i = 0; i < R; ++i) {
      const int64_t row_lanes = (m0 + i) * chunks * 8 + lane_off;
      const __m256 sxv = _mm256_loadu_ps(x.lane_scales.data() + row_lanes);
      const __m256i xsv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.lane_sums.data() + row_lanes));
      const int8_t* xe = x.even() + (m0 + i) * x.stride + c;
      const int8_t* xo = x.odd() + (m0 + i) * x.stride + c;
      static_assert(kInt4SymmetricZeroPoint == 8, "the shift below multiplies by the zero point");
      const __m256i sym_corr = _mm256_slli_epi32(xsv, 3);  // kSym: every zero point is 8
      for (int r = 0; r < NR; ++r) {
        const __m256i corr = kSym ? sym_corr : _mm256_mullo_epi32(zpv[r], xsv);
        const __m256i d = _mm256_sub_epi32(DotChunk(lo[r], hi[r], xe, xo), corr);
        facc[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(swv[r], sxv), facc[r][i]);
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < R; ++i) y[(m0 + i) * ldy + r] = HSum(facc[r][i]);
}

template <class ST, int NR, int R>
void Tile(const RowView& v, int64_t n, int64_t m0, float* y, int64_t ldy) {
  if (v.half >= 32) return TileWide<ST, NR, R>(v, n, m0, y, ldy);
  const bool sym = v.p->zp == nullptr;
  if (v.half == 16) {
    return sym ? TileNarrow<ST, 2, true, NR, R>(v, n, m0, y, ldy) : TileNarrow<ST, 2, false, NR, R>(v, n, m0, y, ldy);
  }
  return sym ? TileNarrow<ST, 4, true, NR, R>(v, n, m0, y, ldy) : TileNarrow<ST, 4, false, NR, R>(v, n, m0, y, ldy);
}

// Columns [n0, n1) for rows m0 .. m0 + R - 1 of X, NR weight rows at a time.
template <class ST, int NR, int R>
void Columns(const RowView& v, int64_t n0, int64_t n1, int64_t m0, float* y, int64_t ldy) {
  int64_t n = n0;
  for (; n + NR <= n1; n += NR) Tile<ST, NR, R>(v, n, m0, y + (n - n0), ldy);
  for (; n < n1; ++n) Tile<ST, 1, R>(v, n, m0, y + (n - n0), ldy);
}

// Rows of X in groups of 4 (each decoded chunk feeds 4 dot products); one row takes 4 weight rows
// at a time instead (2 for blocks of 16 / 32), so that independent accumulators still hide the
// latency at M = 1.
template <class ST>
void Rows(const Int4Int8Params& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t nb = p.x->n_blocks, half = p.block_size / 2;
  const RowView v{&p, nb, half, nb * half, (nb + 1) / 2};
  const int64_t m = p.x->m;
  int64_t m0 = 0;
  for (; m0 + 4 <= m; m0 += 4) Columns<ST, 1, 4>(v, n0, n1, m0, y, ldy);
  switch (m - m0) {
    case 3: Columns<ST, 1, 3>(v, n0, n1, m0, y, ldy); break;
    case 2: Columns<ST, 2, 2>(v, n0, n1, m0, y, ldy); break;
    case 1:  // blocks of 16 / 32 hold more state per weight row: 4 rows spilled (1.5x slower, s26)
      half >= 32 ? Columns<ST, 4, 1>(v, n0, n1, m0, y, ldy) : Columns<ST, 2, 1>(v, n0, n1, m0, y, ldy);
      break;
    default: break;
  }
}

}  // namespace

void Int4Int8RowsAvx2(const Int4Int8Params& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (p.scale_type) {
    case ScaleType::kFloat16: Rows<Half>(p, n0, n1, y, ldy); break;
    case ScaleType::kBFloat16: Rows<BFloat16>(p, n0, n1, y, ldy); break;
    default: Rows<float>(p, n0, n1, y, ldy); break;
  }
}

}  // namespace int8_isa
}  // namespace pyquant

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
