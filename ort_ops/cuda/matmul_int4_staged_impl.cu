// MatMulInt4: the staged mma kernel, row-major B (the layout of the file, int4_block.h), for small
// and medium M (mid variants kInt4StagedVariantFirst.., matmul_int4_impl.cu).
//
// Why: the register kernels (int4_smallm_kernel) read X straight from L1 / L2 in every CTA, with
// each lane's X load right before its MMAs, and keep their weights in flight in registers; in the
// profiles they are latency-bound (about one eligible warp per scheduler, long-scoreboard stalls
// first) at 33-54 % of the HBM floor at M = 16. Here both operands stream through a kStages-deep
// cp.async pipeline in shared memory (bytes in flight cost no registers), X is staged once per CTA
// for all its column tiles, and the weight fragments come out of shared memory by ldmatrix.
//
// Operands: the weights are mma.sync's A operand (16 weight rows = 16 output columns n per tile),
// X its B operand (8 tokens per n8 tile), so M <= 8 wastes nothing and each decoded weight
// fragment serves the CTA's 8 * MT8 tokens.
//
// One CTA: kWarps = WN * WK warps. Warp (wn, wk) owns the n16 tiles wn * NT .. wn * NT + NT - 1 of
// the CTA's kRows = 16 * NT * WN rows and, in every stage, the 64-wide K "unit" wk of the stage's
// WK units (kStageK = 64 * WK). After the mainloop the WK warps of a row range and the kS ranks
// of a cluster (K split) add their partial tiles in a fixed order.
//
// Stage layout (bytes), s = stage slot:
//   W: [row r = 0 .. kRows - 1][kRowChunks 16-byte chunks = kStageK / 2 bytes]; chunk c of row r
//      at chunk position c ^ ((r / (8 / kRowChunks)) % kRowChunks): the 8 row addresses of one
//      ldmatrix phase (same c, 8 consecutive rows) then hit 8 different 16-byte bank groups.
//   X: [token t = 0 .. 8 MT8 - 1][kStageK * 2 bytes]; 16-byte chunk c of token t at c ^ ((t & 1) << 2):
//      one 16-byte-per-lane phase (tokens t, t + 1, chunks c0 .. c0 + 3) is then conflict-free.
//   Tokens >= M and rows >= N are zero-filled (cp.async with 0 source bytes).
//
// The k <-> fragment-slot mapping (the MMA sums over k in any order; A and B use the same one):
// ldmatrix.x4 of tile j gives lane (g = lane / 4, t = lane % 4) four words: rows g and g + 8 of
// the tile, each over the unit's k spans 0 and 1 (32 codes each); a word holds codes
// k = 32 span + 8 t + i in nibble i (i = 0 .. 7; low nibble = even k). The decode pairs nibbles
// (i, i + 4) in one register (DecodeShufWord: (v & 0x000F000F) etc.), so
//   step 2 span:     a0 / a1 = rows g / g + 8 at nibbles (0, 4), a2 / a3 at (1, 5)
//   step 2 span + 1: a0 / a1 at (2, 6), a2 / a3 at (3, 7)
// and lane (g, t)'s B fragments are X[token g][32 span + 8 t + (0, 4)], (1, 5) / (2, 6), (3, 7):
// one 16-byte shared load of X[token g][32 span + 8 t .. + 7] and four byte permutes.
// Accumulator c0, c1 = row g, tokens 2 t, 2 t + 1; c2, c3 = row g + 8.
//
// Scales: (q - zp) * s rounded once to T (as every fast kernel of this op). block_size >= 64, so a
// unit lies in one block; each lane loads its rows' scales and zero points for stage i + 1 during
// stage i (two register slots, the loop unrolled by 2: a register is never moved while its load
// is in flight).
//
// The shuffled order (kShuf; LaunchInt4StagedShuffled): on Hopper the op rewrites a constant B in
// place into layout/int4_shuffled.h's order, and then no row-major kernel can read it; the register
// mma kernel there (matmul_int4_shuffled_impl.cu) keeps one group of weights in flight in registers
// and streamed narrow layers at 39 % of the HBM floor at M = 8 (14336 x 4096), against 57 % for this
// kernel on row-major B (bench/results/2026-11-27-h100-s36-gemvdefault-narrow-bench-cuda.md). The
// same pipeline, CTA shapes, K splits and sums serve it; only the stage contents differ:
//   W: [tile][k16 step][128 bytes], each 128 bytes one tile-step of B copied as stored (a CTA's
//      tiles of one step are contiguous in B); ldmatrix.x4 over four steps of a tile hands each
//      lane its own word per step, which is its m16n8k16 A fragment (no k permutation);
//   X: [token][kStageK * 2 bytes] with chunk c of token t at c ^ (t & 7), read by ldmatrix.x4 as
//      8 tokens x 8 k per matrix = the B fragments b0 / b1 in the standard k order.
//
// Preconditions (LaunchInt4Staged checks them, else cudaErrorNotSupported): T = __half /
// __nv_bfloat16, block_size >= 64, K % kStageK == 0 (so B rows have no padding), 16-byte aligned
// X and B, and a K split only on sm_90 (clusters).
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/device_info.h"
#include "cuda/matmul_int4.h"
#include "cuda/matmul_int4_impl.cuh"
#include "cuda/matmul_int4_shuffled_impl.cuh"
#include "cuda/matmul_int4_staged.h"
#include "cuda/staged_common.cuh"
#include "cuda/staged_split.h"
#include "layout/int4_shuffled.h"

namespace pyquant {

using namespace cuda_detail;

namespace {

template <int MT8, int NT, int WN, int WK, int kStages>
struct StagedShape {
  static constexpr int kWarps = WN * WK;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * NT * WN;       // weight rows (output columns) per CTA
  static constexpr int kTokens = 8 * MT8;          // tokens per CTA
  static constexpr int kStageK = 64 * WK;          // k per stage: one 64-wide unit per k-warp
  static constexpr int kRowChunks = kStageK / 32;  // 16-byte chunks of a weight row per stage
  static constexpr int kWBytes = kRows * kStageK / 2;
  static constexpr int kXRowBytes = kStageK * 2;
  static constexpr int kXBytes = kTokens * kXRowBytes;
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kPartStride = kRows + 4;  // fp32 words per token row of a partial tile
  static constexpr int kPartBytes = WK * kTokens * kPartStride * 4;
  static constexpr int kSmem = std::max(kStages * kStageBytes, kPartBytes);
  static_assert(kRowChunks == 2 || kRowChunks == 4 || kRowChunks == 8, "W swizzle covers 2 / 4 / 8 chunks per row");
  static_assert(kWBytes % (16 * kThreads) == 0, "whole cp.async pieces per thread");
};

__device__ __forceinline__ uint4 StagedLds128(const void* smem) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}

// A lane's scales and zero points of one stage: tile j, row half h (rows g, g + 8).
template <typename T, int NT, bool kAsym>
struct StagedScales {
  T s[NT][2];
  uint8_t z[kAsym ? NT : 1][2];  // the zero-point byte (two blocks' nibbles); none when symmetric
};

// The 16-byte chunk position of X's chunk c of token t in a stage. Row-major B: c ^ ((t & 1) << 2)
// (one 16-byte-per-lane phase reads tokens t, t + 1 at chunks c0 .. c0 + 3); shuffled B: c ^ (t & 7)
// (one ldmatrix phase reads 8 tokens at one chunk, 16-byte banks all distinct; rows of >= 8 chunks).
template <bool kShuf>
__device__ __forceinline__ int XChunkAt(int t, int c) {
  return kShuf ? c ^ (t & 7) : c ^ ((t & 1) << 2);
}

// One stage's work of warp (wn, wk) on B in the shuffled order: its 64-wide unit wk (k16 steps
// 4 wk .. 4 wk + 3 of the stage) of the n16 tiles wn NT + j.
//   W: ldmatrix.x4 over the tile's four 128-byte steps gives each lane its own word of each step
//      (a 128-byte tile read as 8 rows of 16 bytes: lane (g, t) gets word t of row g = word
//      4 g + t = its A fragment, layout/int4_shuffled.h), decoded by DecodeShufWord with rows
//      g / g + 8 of the tile.
//   X: ldmatrix.x4 over tokens 8 mi .. + 7 (rows) and four 8-wide k chunks gives lane (g, t)
//      X[token g][8 c + 2 t, + 1] per chunk: b0 / b1 of two steps (chunks 2 u, 2 u + 1).
// zp_nibble: the block's zero-point nibble within the loaded byte.
template <typename T, int MT8, int NT, bool kAsym, int kXRowBytes, int kStageSteps>
__device__ __forceinline__ void ShufStep(float (&acc)[NT][MT8][4], const uint8_t* ws, const uint8_t* xs,
                                         const StagedScales<T, NT, kAsym>& sc, int lane, int wn, int wk,
                                         int zp_nibble) {
  const int mat = lane >> 3, mrow = lane & 7;
  // X fragments of token tile mi, steps 2 h and 2 h + 1: [u][b0, b1]
  auto load_xb = [&](int mi, int h, uint32_t (&xb)[2][2]) {
    const int t = 8 * mi + mrow, c = 8 * wk + 4 * h + mat;
    uint32_t r[4];
    Ldmatrix4(r, xs + t * kXRowBytes + 16 * XChunkAt<true>(t, c));
    xb[0][0] = r[0], xb[0][1] = r[1], xb[1][0] = r[2], xb[1][1] = r[3];
  };
  auto rows_of = [&](int j) {
    const int z0 = kAsym ? Int4ZeroPointAt(&sc.z[kAsym ? j : 0][0], zp_nibble) : kInt4SymmetricZeroPoint;
    const int z1 = kAsym ? Int4ZeroPointAt(&sc.z[kAsym ? j : 0][1], zp_nibble) : kInt4SymmetricZeroPoint;
    return RowPairDecodeConstants<T>(sc.s[j][0], z0, sc.s[j][1], z1);
  };
  auto load_w = [&](int j, uint32_t (&wq)[4]) {
    Ldmatrix4(wq, ws + ((wn * NT + j) * kStageSteps + 4 * wk + mat) * kInt4ShuffleTileBytes + 16 * mrow);
  };
  if constexpr (MT8 <= 2) {
    // few tokens: X's fragments of the unit's four steps first, then one tile at a time
    uint32_t xb[2][MT8][2][2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int mi = 0; mi < MT8; ++mi) load_xb(mi, h, xb[h][mi]);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      uint32_t wq[4];
      load_w(j, wq);
      const ShufRows<T> rows = rows_of(j);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        uint32_t a[4];
        DecodeShufWord<T, true>(wq[u], rows, a);
#pragma unroll
        for (int mi = 0; mi < MT8; ++mi) {
          const uint32_t (&b)[2] = xb[u >> 1][mi][u & 1];
          Mma16816<T>(acc[j][mi], a[0], a[1], a[2], a[3], b[0], b[1]);
        }
      }
    }
  } else {
    // many tokens: the tiles' words first, decoded two steps at a time, then one token tile's X
    // at a time
    uint32_t wq[NT][4];
    ShufRows<T> rows[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      load_w(j, wq[j]);
      rows[j] = rows_of(j);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t a[NT][2][4];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        DecodeShufWord<T, true>(wq[j][2 * h], rows[j], a[j][0]);
        DecodeShufWord<T, true>(wq[j][2 * h + 1], rows[j], a[j][1]);
      }
#pragma unroll
      for (int mi = 0; mi < MT8; ++mi) {
        uint32_t xb[2][2];
        load_xb(mi, h, xb);
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int u = 0; u < 2; ++u)
            Mma16816<T>(acc[j][mi], a[j][u][0], a[j][u][1], a[j][u][2], a[j][u][3], xb[u][0], xb[u][1]);
      }
    }
  }
}

// x [M, K] T, b [N, K / 2] (row-major, row_bytes = K / 2), scales [N, nb] T, zp [N, zp_row_bytes]
// or nullptr, bias [N] T or nullptr, y [M, N] T. grid = (ceil(N / kRows) * kS, ceil(M / (8 MT8)), gs.kz),
// cluster (ks, 1, 1) (ks = 1: none; > 1 on sm_90 only), block kThreads, dynamic shared memory kSmem.
// K is split into ks * gs.kz parts (staged_split.h): part blockIdx.z * ks + rank.
// kShuf: B in the shuffled order (layout/int4_shuffled.h) instead of row-major; see the section
// "The shuffled order" at the top of this file.
template <typename T, int MT8, int NT, int WN, int WK, int kStages, bool kAsym, int kMinBlocks, bool kShuf>
__global__ void __launch_bounds__(32 * WN * WK, kMinBlocks)
    int4_staged_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b, const T* __restrict__ scales,
                       const uint8_t* __restrict__ zp, const T* __restrict__ bias, T* __restrict__ y, Int4Geom g,
                       int ks, StagedGridSplit gs, bool weights_early) {
  using S = StagedShape<MT8, NT, WN, WK, kStages>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gr = lane >> 2, tq = lane & 3;
  const int wn = warp % WN, wk = warp / WN;
  const int rank = static_cast<int>(blockIdx.x % ks);
  const int row0 = static_cast<int>(blockIdx.x / ks) * S::kRows;  // the CTA's first weight row
  const int m0 = blockIdx.y * S::kTokens;
  const StagedStageRange part = StagedPartStages(g.k / S::kStageK, blockIdx.z * ks + rank, ks * gs.kz);
  const int s_begin = part.begin, n_my = part.count;
  const int64_t row_bytes = g.k / 2;

  auto w_stage = [&](int slot) { return smem + slot * S::kStageBytes; };
  auto x_stage = [&](int slot) { return smem + slot * S::kStageBytes + S::kWBytes; };
  // Stage i (of this rank) into slot i % kStages. Thread tid copies pieces tid + q * kThreads:
  // W rows r = tid / kRowChunks + q * (kThreads / kRowChunks), chunk c = tid % kRowChunks (fixed);
  // X tokens t = tid / kXChunks + q * (kThreads / kXChunks), chunk tid % kXChunks.
  // Every address part that does not change from stage to stage is computed here, once: rebuilt
  // per piece and stage from its indices (64-bit products, the kernel parameters re-read from the
  // constant bank), they took ~12 integer instructions per 16-byte copy and ~6 per scale load,
  // about a quarter of the main loop's instructions (tools/sass_mix.py; notes s40). A stage's
  // offsets below fit in 32 bits: B (shuffled: N K / 2 < 2^31, ShuffleInt4Weights) and X
  // (M K < 2^31, ChooseInt4Path / LaunchMatMulInt4Shuffled) are under 2 GB.
  constexpr int kXChunks = S::kXRowBytes / 16;
  static_assert(S::kThreads % S::kRowChunks == 0 && S::kThreads % kXChunks == 0, "fixed chunk per thread");
  const int w_r = tid / S::kRowChunks, w_c = tid % S::kRowChunks;
  const int x_t = tid / kXChunks, x_c = tid % kXChunks;
  constexpr int kWPieces = S::kWBytes / 16 / S::kThreads;
  // Row-major W: piece q of stage i at w_src + q * w_q + i * kStageK / 2; its shared-memory chunk
  // position is the same for every q (kThreads / 8 rows' swizzle periods per q step).
  constexpr int kRowStep = S::kThreads / S::kRowChunks;
  static_assert((S::kThreads / 8) % S::kRowChunks == 0, "one swizzled chunk position per thread");
  const uint8_t* w_src =
      PinnedPointer(b + int64_t(row0 + w_r) * row_bytes + int64_t(s_begin) * (S::kStageK / 2) + 16 * w_c);
  const int64_t w_q = int64_t(kRowStep) * row_bytes;
  const int w_dst = w_r * (S::kStageK / 2) + 16 * (w_c ^ ((w_r / (8 / S::kRowChunks)) % S::kRowChunks));
  // X: piece q of stage i at x_src + q * x_q + i * kStageK (elements).
  constexpr int kTokStep = S::kThreads / kXChunks;
  const T* x_src = PinnedPointer(x + int64_t(m0 + x_t) * g.k + int64_t(s_begin) * S::kStageK + 8 * x_c);
  const int x_q = kTokStep * g.k;
  // Shuffled order: stage i holds the k16 steps kStageSteps i .. of the CTA's kTiles n16 tiles;
  // for one step those tiles are contiguous in B (kTiles * 128 bytes). 16-byte piece index
  // tid + q * kThreads = (step, tile, piece c) with c fastest (consecutive threads, consecutive
  // global bytes), stored at [tile][step][128 bytes]: a tile's steps adjacent, so one ldmatrix.x4
  // takes four steps of one tile. kThreads is a multiple of 8 kTiles (NT <= 4 WK), so a thread's
  // c and tile are the same in every piece and its step advances by kStepsPerQ per q. Tiles past N
  // (the last CTA of a layer with N % kRows != 0) are zero-filled: their source is B itself with
  // zero strides (a valid address that cp.async does not read).
  constexpr int kTiles = S::kRows / 16, kStageSteps = S::kStageK / 16;
  static_assert(S::kThreads % (8 * kTiles) == 0, "a thread's tile and chunk fixed over its pieces");
  constexpr int kStepsPerQ = S::kThreads / (8 * kTiles);
  const int n_tiles = g.n / 16;  // N % 128 == 0 wherever B is shuffled
  const int sh_c = tid % 8, sh_tl = (tid / 8) % kTiles, sh_st0 = tid / (8 * kTiles);
  const bool sh_valid = row0 / 16 + sh_tl < n_tiles;
  const uint8_t* sh_src =
      sh_valid ? b +
                     (int64_t(row0 / 16 + sh_tl) + int64_t(n_tiles) * (int64_t(s_begin) * kStageSteps + sh_st0)) *
                         kInt4ShuffleTileBytes +
                     16 * sh_c
               : b;
  const int sh_stage = sh_valid ? n_tiles * kStageSteps * kInt4ShuffleTileBytes : 0;  // B bytes per stage
  const int sh_q = sh_valid ? n_tiles * kStepsPerQ * kInt4ShuffleTileBytes : 0;       // per q
  const int sh_dst = (sh_tl * kStageSteps + sh_st0) * kInt4ShuffleTileBytes + 16 * sh_c;
  auto load_w = [&](int i) {
    uint8_t* dst = w_stage(i % kStages);
    if constexpr (kShuf) {
      const uint8_t* src = sh_src + i * sh_stage;
#pragma unroll
      for (int q = 0; q < kWPieces; ++q) {
        CpAsync16(dst + sh_dst + q * kStepsPerQ * kInt4ShuffleTileBytes, src + q * sh_q, sh_valid);
      }
    } else {
      const uint8_t* src = w_src + i * (S::kStageK / 2);
#pragma unroll
      for (int q = 0; q < kWPieces; ++q) {
        const bool valid = row0 + w_r + q * kRowStep < g.n;
        CpAsync16(dst + w_dst + q * kRowStep * (S::kStageK / 2), valid ? src + q * w_q : b, valid);
      }
    }
  };
  auto load_x = [&](int i) {
    uint8_t* dst = x_stage(i % kStages);
    const T* src = x_src + i * S::kStageK;
#pragma unroll
    for (int q = 0; q < (S::kTokens * kXChunks + S::kThreads - 1) / S::kThreads; ++q) {
      const int t = x_t + q * kTokStep;
      if (t < S::kTokens) {
        const bool valid = m0 + t < g.m;
        CpAsync16(dst + t * S::kXRowBytes + 16 * XChunkAt<kShuf>(t, x_c), valid ? src + q * x_q : x, valid);
      }
    }
  };
  // This lane's scales of stage i: rows row0 + 16 (wn NT + j) + gr + 8 h, block of unit wk; row
  // 16 j + 8 h of the lane's first, sc_row, is 8 (2 j + h) rows further on.
  const int sc_first = row0 + 16 * wn * NT + gr;
  const T* sc_row = PinnedPointer(scales + int64_t(sc_first) * g.nb);
  const int sc_8rows = 8 * g.nb;
  const uint8_t* zp_row = kAsym ? PinnedPointer(zp + int64_t(sc_first) * g.zp_row_bytes) : nullptr;
  const int zp_8rows = 8 * g.zp_row_bytes;
  auto load_scales = [&](int i, StagedScales<T, NT, kAsym>& sc) {
    const int blk = ((s_begin + i) * S::kStageK + 64 * wk) >> g.bs_log2;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r8 = 2 * j + h;  // row sc_first + 8 r8
        const bool valid = sc_first + 8 * r8 < g.n;
        sc.s[j][h] = valid ? sc_row[r8 * sc_8rows + blk] : StoreT<T>(0.0f);
        if constexpr (kAsym) sc.z[j][h] = valid ? zp_row[r8 * zp_8rows + (blk >> 1)] : uint8_t{0x88};
      }
  };

  float acc[NT][MT8][4];
  ZeroAcc(acc);

  // Prologue: stages 0 .. kStages - 2 in flight (weights early only when constant).
  PdlPipelinePrologue<kStages>(n_my, weights_early, load_w, load_x);

  // ldmatrix row address of this lane: matrix lane / 8 = (row half, span), row lane % 8.
  const int lm_row = (lane & 7) + 8 * ((lane >> 3) & 1);
  const int lm_span = lane >> 4;

  auto step = [&](int i, const StagedScales<T, NT, kAsym>& cur, StagedScales<T, NT, kAsym>& nxt) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // stage i landed for every thread; slot (i - 1) % kStages is free again
    if (i + kStages - 1 < n_my) {
      load_w(i + kStages - 1);
      load_x(i + kStages - 1);
    }
    CpAsyncCommit();
    if (i + 1 < n_my) load_scales(i + 1, nxt);

    const uint8_t* ws = w_stage(i % kStages);
    const uint8_t* xs = x_stage(i % kStages);
    if constexpr (kShuf) {
      ShufStep<T, MT8, NT, kAsym, S::kXRowBytes, kStageSteps>(
          acc, ws, xs, cur, lane, wn, wk, (((s_begin + i) * S::kStageK + 64 * wk) >> g.bs_log2) & 1);
      return;
    }
    uint32_t wq[NT][4];  // tile j: rows g / g + 8 x spans 0 / 1 (ldmatrix matrices 0..3)
    auto ldmatrix_tile = [&](int j) {
      const int r = 16 * (wn * NT + j) + lm_row;
      const int c = 2 * wk + lm_span;
      Ldmatrix4(wq[j], ws + r * (S::kStageK / 2) + 16 * (c ^ ((r / (8 / S::kRowChunks)) % S::kRowChunks)));
    };
    // Block of this warp's unit: its zero-point nibble within the loaded byte.
    const int zp_nibble = (((s_begin + i) * S::kStageK + 64 * wk) >> g.bs_log2) & 1;
    auto row_of = [&](int j, int h) {
      const int z = kAsym ? Int4ZeroPointAt(&cur.z[j][h], zp_nibble) : kInt4SymmetricZeroPoint;
      return RowDecodeConstants<T>(cur.s[j][h], z);
    };
    // Tile j's A registers of the span's two steps: [step][a0..a3].
    auto decode = [&](int j, int span, uint32_t (&a)[2][4]) {
      uint32_t dg[4], dh[4];
      DecodeShufWord<T, true>(wq[j][2 * span], row_of(j, 0), dg);
      DecodeShufWord<T, true>(wq[j][2 * span + 1], row_of(j, 1), dh);
      a[0][0] = dg[0], a[0][1] = dh[0], a[0][2] = dg[1], a[0][3] = dh[1];
      a[1][0] = dg[2], a[1][1] = dh[2], a[1][2] = dg[3], a[1][3] = dh[3];
    };
    // Token tile mi's B registers of the span's two steps: [step][b0, b1].
    auto load_xb = [&](int mi, int span, uint32_t (&xb)[2][2]) {
      const int t = 8 * mi + gr;
      const int c = 8 * wk + 4 * span + tq;
      const uint4 xv = StagedLds128(xs + t * S::kXRowBytes + 16 * (c ^ ((t & 1) << 2)));
      xb[0][0] = __byte_perm(xv.x, xv.z, 0x5410);
      xb[0][1] = __byte_perm(xv.x, xv.z, 0x7632);
      xb[1][0] = __byte_perm(xv.y, xv.w, 0x5410);
      xb[1][1] = __byte_perm(xv.y, xv.w, 0x7632);
    };
    auto mma2 = [&](float (&c)[4], const uint32_t (&a)[2][4], const uint32_t (&xb)[2][2]) {
      Mma16816<T>(c, a[0][0], a[0][1], a[0][2], a[0][3], xb[0][0], xb[0][1]);
      Mma16816<T>(c, a[1][0], a[1][1], a[1][2], a[1][3], xb[1][0], xb[1][1]);
    };
    if constexpr (MT8 <= 2) {
      // few tokens: X's fragments of both spans first, then one tile at a time (registers)
      uint32_t xb[2][MT8][2][2];
#pragma unroll
      for (int span = 0; span < 2; ++span)
#pragma unroll
        for (int mi = 0; mi < MT8; ++mi) load_xb(mi, span, xb[span][mi]);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        ldmatrix_tile(j);
#pragma unroll
        for (int span = 0; span < 2; ++span) {
          uint32_t a[2][4];
          decode(j, span, a);
#pragma unroll
          for (int mi = 0; mi < MT8; ++mi) mma2(acc[j][mi], a, xb[span][mi]);
        }
      }
    } else {
      // many tokens: the span's tiles decoded first, then one token tile's X at a time
#pragma unroll
      for (int j = 0; j < NT; ++j) ldmatrix_tile(j);
#pragma unroll
      for (int span = 0; span < 2; ++span) {
        uint32_t a[NT][2][4];
#pragma unroll
        for (int j = 0; j < NT; ++j) decode(j, span, a[j]);
#pragma unroll
        for (int mi = 0; mi < MT8; ++mi) {
          uint32_t xb[2][2];
          load_xb(mi, span, xb);
#pragma unroll
          for (int j = 0; j < NT; ++j) mma2(acc[j][mi], a[j], xb);
        }
      }
    }
  };

  StagedScales<T, NT, kAsym> sc0, sc1;
  if (n_my > 0) load_scales(0, sc0);
  StagedMainLoop(n_my, sc0, sc1, step);  // staged_common.cuh

  // The k-warps' and the cluster ranks' partial tiles added, bias, store (staged_common.cuh).
  const StagedTileAt at{g.m, g.n, m0, row0};
  StagedReduceStore<NT, MT8, WN, WK, S::kThreads>(acc, smem, ks, rank, gs, at, [&](int tok, int row, float v) {
    if (m0 + tok >= g.m || row0 + row >= g.n) return;
    if (bias) v += LoadF(bias, row0 + row);
    y[int64_t(m0 + tok) * g.n + row0 + row] = StoreT<T>(v);
  });
}

template <typename T, int MT8, int NT, int WN, int WK, bool kAsym, bool kShuf>
cudaError_t LaunchStaged(int ks, int kz, int max_kz, const T* x, const uint8_t* b, const T* s, const uint8_t* zp,
                         const T* bias, T* y, const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  constexpr int kStages = 4;
  using S = StagedShape<MT8, NT, WN, WK, kStages>;
  // Two CTAs (16 warps) per SM where the shared memory allows and the accumulators fit 128 registers.
  constexpr int kMinBlocks = S::kSmem <= 110 * 1024 && MT8 <= 4 ? 2 : 1;
  auto kernel = int4_staged_kernel<T, MT8, NT, WN, WK, kStages, kAsym, kMinBlocks, kShuf>;
  static StagedLaunchFlags attributes_set;  // over 48 KB of dynamic shared memory, clusters of 16
  if (const cudaError_t e = PrepareStagedLaunch(kernel, S::kSmem, ks, attributes_set); e != cudaSuccess) return e;
  const StagedLaunchSplit ls = StagedSplitForLaunch(reinterpret_cast<const void*>(kernel), S::kThreads, S::kSmem, g.n,
                                                    g.m, S::kRows, S::kTokens, ks, kz, max_kz, stream);
  return LaunchWithPdlCluster(kernel, ls.grid, dim3(S::kThreads), S::kSmem, static_cast<unsigned>(ls.ks), stream,
                              pdl.launch, x, b, s, zp, bias, y, g, ls.ks, ls.gs, pdl.weights_early);
}

// The column tiles per warp at MT8 token tiles: 4 up to 16 tokens, else 2 (accumulators).
constexpr int StagedNt(int mt8) { return mt8 <= 2 ? 4 : 2; }

template <typename T, int MT8, bool kShuf>
cudaError_t LaunchStagedShape(const Int4StagedPlan& plan, const T* x, const uint8_t* b, const T* s, const uint8_t* zp,
                              const T* bias, T* y, const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  constexpr int NT = StagedNt(MT8);
  auto launch = [&](auto wn, auto asym) {
    constexpr int kWn = decltype(wn)::value;
    return LaunchStaged<T, MT8, NT, kWn, 8 / kWn, decltype(asym)::value, kShuf>(plan.ks, plan.kz, plan.max_kz, x, b, s,
                                                                                zp, bias, y, g, pdl, stream);
  };
  using Wide = std::integral_constant<int, 4>;
  using Tall = std::integral_constant<int, 2>;
  if (zp != nullptr) return plan.tall ? launch(Tall{}, std::true_type{}) : launch(Wide{}, std::true_type{});
  return plan.tall ? launch(Tall{}, std::false_type{}) : launch(Wide{}, std::false_type{});
}

template <typename T, bool kShuf>
cudaError_t LaunchStagedPlan(const Int4StagedPlan& plan, const T* x, const uint8_t* b, const T* s, const uint8_t* zp,
                             const T* bias, T* y, const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  switch (plan.mt8) {
    case 1: return LaunchStagedShape<T, 1, kShuf>(plan, x, b, s, zp, bias, y, g, pdl, stream);
    case 2: return LaunchStagedShape<T, 2, kShuf>(plan, x, b, s, zp, bias, y, g, pdl, stream);
    case 4: return LaunchStagedShape<T, 4, kShuf>(plan, x, b, s, zp, bias, y, g, pdl, stream);
    default: return LaunchStagedShape<T, 8, kShuf>(plan, x, b, s, zp, bias, y, g, pdl, stream);
  }
}

}  // namespace

Int4StagedPlan PlanInt4Staged(int shape, const Int4Geom& g, Int4StagedLimits lim) {
  Int4StagedPlan plan;
  if (g.bs_log2 < 6) return plan;
  plan.mt8 = g.m <= 8 ? 1 : g.m <= 16 ? 2 : g.m <= 32 ? 4 : 8;
  while (lim.max_tokens >= 8 && 8 * plan.mt8 > lim.max_tokens) plan.mt8 /= 2;
  const int nt = StagedNt(plan.mt8);
  int dev = 0;
  const bool sm90 = CurrentDeviceIsSm90(&dev);
  const int sms = CudaSmCount(dev) > 0 ? CudaSmCount(dev) : 132;
  const int64_t m_tiles = (g.m + 8 * plan.mt8 - 1) / (8 * plan.mt8);
  // kInt4StagedAuto: the 4 x 2 warp grid unless its CTAs, even split 8 ways, cover fewer than the
  // SMs; then the 2 x 4 one (half the rows per CTA, twice the K per stage). At 64 tokens per CTA
  // each tall CTA re-reads all of X for half the rows, which costs more than the CTAs it adds
  // unless the wide grid is very small: tall only where the wide one, split 8 ways, covers fewer
  // than a quarter of the SMs (wide CTAs * 32 < SMs). H100, M = 48 / 64 (…-s20-staged-narrow-bench-cuda.md): N = 1024
  // wide 14.8 / 21.0 µs vs tall 19.5 / 27.2 (K = 8192 / 14336); N = 512 tall 13.6 vs wide 20.5.
  auto ctas = [&](bool tall) { return (g.n + 16 * nt * (tall ? 2 : 4) - 1) / (16 * nt * (tall ? 2 : 4)) * m_tiles; };
  const int64_t tall_factor = plan.mt8 == 8 ? 32 : 8;
  plan.tall = shape == kInt4StagedTall || (shape == kInt4StagedAuto && ctas(false) * tall_factor < sms);
  const int stage_k = 64 * (plan.tall ? 4 : 2);
  if (g.k % stage_k != 0) return plan;
  const int stages = g.k / stage_k;
  // The K split (StagedClusterSplit): >= 1.5 CTAs per SM, each rank >= 2 stages. Only where sm_90
  // machine code was built (PYQUANT_WITH_SM90, as ClusterKSplitFor): a build without it runs on an
  // H100 from JIT-compiled older PTX, whose kernel has no cluster sum.
  plan.ks = sm90 && kSm90Build ? StagedClusterSplit(ctas(plan.tall), stages, sms, lim.split.max_cluster) : 1;
  plan.kz = StagedGridSplitFor(ctas(plan.tall), plan.ks, stages, sms, lim.split.max_kz);
  plan.max_kz = lim.split.max_kz;
  plan.ok = true;
  return plan;
}

template <typename T>
cudaError_t LaunchInt4Staged(int shape, Int4StagedLimits lim, const T* x, const uint8_t* b, const T* s,
                             const uint8_t* zp, const T* bias, T* y, const Int4Geom& g, PdlMode pdl,
                             cudaStream_t stream) {
  const Int4StagedPlan plan = PlanInt4Staged(shape, g, lim);
  if (!plan.ok || g.row_bytes != g.k / 2) return cudaErrorNotSupported;
  return LaunchStagedPlan<T, false>(plan, x, b, s, zp, bias, y, g, pdl, stream);
}

template <typename T>
cudaError_t LaunchInt4StagedShuffled(int shape, Int4StagedLimits lim, const T* x, const uint8_t* b, const T* s,
                                     const uint8_t* zp, const T* bias, T* y, const cuda_detail::Int4Geom& g,
                                     PdlMode pdl, cudaStream_t stream) {
  const Int4StagedPlan plan = PlanInt4Staged(shape, g, lim);
  if (!plan.ok || g.n % 128 != 0 || g.k % 64 != 0) return cudaErrorNotSupported;
  return LaunchStagedPlan<T, true>(plan, x, b, s, zp, bias, y, g, pdl, stream);
}

template cudaError_t LaunchInt4Staged<__half>(int, Int4StagedLimits, const __half*, const uint8_t*, const __half*,
                                              const uint8_t*, const __half*, __half*, const Int4Geom&, PdlMode,
                                              cudaStream_t);
template cudaError_t LaunchInt4Staged<__nv_bfloat16>(int, Int4StagedLimits, const __nv_bfloat16*, const uint8_t*,
                                                     const __nv_bfloat16*, const uint8_t*, const __nv_bfloat16*,
                                                     __nv_bfloat16*, const Int4Geom&, PdlMode, cudaStream_t);

template cudaError_t LaunchInt4StagedShuffled<__half>(int, Int4StagedLimits, const __half*, const uint8_t*,
                                                      const __half*, const uint8_t*, const __half*, __half*,
                                                      const Int4Geom&, PdlMode, cudaStream_t);
template cudaError_t LaunchInt4StagedShuffled<__nv_bfloat16>(int, Int4StagedLimits, const __nv_bfloat16*,
                                                             const uint8_t*, const __nv_bfloat16*, const uint8_t*,
                                                             const __nv_bfloat16*, __nv_bfloat16*, const Int4Geom&,
                                                             PdlMode, cudaStream_t);

}  // namespace pyquant
