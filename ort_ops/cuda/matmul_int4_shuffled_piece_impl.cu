// MatMulInt4 on the shuffled order (layout/int4_shuffled.h) at decode and small batches: the
// "piece" mma kernel. One 16-byte load per lane feeds four m16n8k16 MMAs.
//
// Why: the CUDA-core GEMV (int4_shuffled_gemv_kernel) spends ~3.05 SASS instructions per weight
// (decode 1.1, fp16 dot-product chains and their fp32 sums ~1, the rest scales, addresses and
// the slow-path checks) and on an H200 it is issue-bound at M = 1: 4096 x 14336 at 72 % of the
// HBM floor, with half of its warps' time waiting on the weight loads at 0.55 instructions per
// cycle (bench/results/2026-11-28-notes-s42.md, "Nsight Compute at M = 1"). The register mma
// kernel (int4_shuffled_mma_kernel) moves the dot products to the tensor cores but reads one
// 32-bit word per lane per MMA and scales every weight in T.
//
// The trick: an MMA's k order is ours to choose as long as A and B agree. In the shuffled order
// word w of piece p of k-tile kt holds, for rows p and p + 8, the codes of k = 16 kt + {2w, 2w+1,
// 2w+8, 2w+9}: the A fragment of lane 4p + w. Here lane (gr, tq) = (lane / 4, lane % 4) loads the
// WHOLE piece gr of k-tile 4u + tq (16 bytes) and feeds its word w to MMA w (w = 0..3): in MMA w
// the lane's A registers sit at the fragment's k = {2tq, 2tq+1, 2tq+8, 2tq+9} and hold the real
// k = 16 (4u + tq) + {2w, 2w+1, 2w+8, 2w+9}. The B fragment of lane (gr', tq') sits at the same
// fragment k for column gr', so it must hold X at those real k: words w of X[token][16 (4u + tq')
// .. + 7] and [.. + 8 .. + 15], two 16-byte loads per lane and unit, no permutes. Four MMAs
// cover one unit = 4 k-tiles (64 k) x 16 rows x 8 tokens.
//
// Per 32 weights and lane: 1 weight load, 36 decode instructions (1 shift + 4 lop3 + 4 sub/fma
// per word, unscaled: q - zp exact in T), 4 MMAs (MT8 = 1) and, per unit, 4 fp32 FMAs that apply
// the rows' block scales to the unit's fp32 partial sums (a unit lies in one block: block_size
// >= 64 on this order). Tokens are the MMA's 8 columns, so M = 1..8 cost the same instructions.
// SASS (nvcc 13.0, fp16, configuration 0, tools/sass_mix.py): 288 instructions per 4 units, 2.25
// per weight (the GEMV: ~3.05); of the 72 per unit, ~8 are moves that pair X's words w of the two
// 16-byte loads into the B operand's register pair, the rest addresses and loop control.
// Measured (H200, matmul_int4.h Int4ShuffledPieceByDefault): faster than the GEMV / staged /
// register kernels at M = 2-8 where N / 16 CTAs fit 4 SMs' worth, and at M = 1-16 on narrow layers
// (N / 16 <= 2 SMs: 16 warps per CTA); slower at M = 1 on wide ones (4096 x 14336: 11.6-15.3
// against the GEMV's 9.7 us), where its CTAs at 71-80 registers either spill into a second wave
// (4 warps) or hold 16 warps per SM (2 tiles).
//
// Numerics: (q - zp) exact in T; the MMA's fp16 x fp16 / bf16 x bf16 products exact in fp32 and
// summed in fp32; one fp32 scale multiply per unit and row; fp32 sums across units and warps in a
// fixed order. No fp16 intermediate sums, so no overflow slow path: within docs/ops.md's limit
// with more margin than the GEMV's chains (products and sums as the reference's fp32 up to
// summation order).
//
// Decomposition: grid = (N / (16 NT), ceil(M / (8 MT8))), block = 32 kWarps; MT8 = 1 for M <= 8,
// 4 for 17 <= M <= 32 on configurations 1 / 2 (PieceMt4Config: one grid row, so the weights are
// streamed once; session 45), 6 or 8 for M > 32 on configuration 1 (kInt4PieceWideConfig: grid
// rows of 48 or 64 tokens, PieceWideMt8For; each decoded unit feeds 24 / 32 MMAs, the MMAs always in
// the paired grouping; sessions 49-50), else 2. A CTA owns NT n16 tiles x 8 MT8 tokens; its warps
// split the K / 64 units: warp w takes units w, w + kWarps, ... (the CTA sweeps consecutive units
// together). Each warp keeps D units of weights, scales and zero points in flight (loaded D units
// ahead); X (L1-resident: every CTA of an SM reads it) is loaded at use. Partial sums meet in
// shared memory in warp order.
//
// Preconditions (LaunchMatMulInt4Shuffled): T = __half / __nv_bfloat16, N % 128 == 0, K % 64 ==
// 0, block_size 64 / 128 / 256, X 16-byte aligned.
#include "cuda/matmul_int4.h"
#include "cuda/matmul_int4_impl.cuh"
#include "cuda/matmul_int4_shuffled_impl.cuh"
#include "cuda/pdl.h"
#include "layout/int4_shuffled.h"

namespace pyquant {

using namespace cuda_detail;

namespace {

// k of one unit: 4 k-tiles, one per lane of a quad.
constexpr int kPieceUnitK = 4 * kInt4ShuffleTile;
// Token tiles of the 64-token instance (33 <= M <= 64 per grid row; configuration 1 only: its
// shared-memory reduction, 8 warps x 32 values x 32 lanes x 4 bytes = 32 KB, fits the static
// limit, 16 warps would not), and of the 48-token one (session 50): 33-48 tokens in one grid row
// wasted a quarter of the 64-token instance's MMAs and X loads on padding tokens. Both run the
// streaming body (token tiles in turn behind one decode) from kPieceStreamMinMt8 token tiles on.
// H200, ORT's chain, 4096^2: M = 33 / 40 / 48 12.0 / 12.6 / 13.0 us against the 64-token
// instance's 13.1 / 13.3 / 14.1 (the session before) and its 14.4 at M = 49 in the same run
// (bench/results/2026-11-29-h200-s50-square-bench-cuda.md). ptxas: 128 registers, 32-40 bytes
// spilled (the 64-token instance 0-24).
constexpr int kPieceWideMt8 = 8;
constexpr int kPieceWide48Mt8 = 6;
constexpr int kPieceStreamMinMt8 = kPieceWide48Mt8;
// Token tiles per grid row for M > 32 on configuration 1: 48 where that needs no more grid rows
// than 64 (M = 33-48, 65-96, ...: less padding at the same weight traffic), else 64.
constexpr int PieceWideMt8For(int64_t m) { return (m + 47) / 48 <= (m + 63) / 64 ? kPieceWide48Mt8 : kPieceWideMt8; }
static_assert(PieceWideMt8For(33) == 6 && PieceWideMt8For(48) == 6 && PieceWideMt8For(49) == 8 &&
                  PieceWideMt8For(64) == 8 && PieceWideMt8For(65) == 6 && PieceWideMt8For(96) == 6 &&
                  PieceWideMt8For(97) == 8 && PieceWideMt8For(130) == 6,
              "48 tokens per grid row where the row count does not grow");
// Its units in flight per warp (D): one. At two, ptxas (nvcc 13.0) spills 108-248 bytes at the 128
// registers that two CTAs per SM allow (at one, 0-24) and the kernel is 7-16 % slower (H200,
// gemv_micro, 4096 x 4096 at M = 33 / 48 / 64 / 128: 14.77 / 16.04 / 18.12 / 34.45 against 13.24 /
// 14.27 / 16.62 / 29.59 us; bench/results/2026-11-29-h200-s49-wide-gemvmicro.log).
constexpr int kPieceWideUnits = 1;

// One unit's loads for NT tiles: the lane's piece, the raw scale bits of its rows gr (low half)
// and gr + 8 (high half) in their block, and with kZp their zero points (bits 0..3 / 8..11).
template <int NT>
struct PieceSlot {
  uint4 q[NT];
  uint32_t s[NT];
  uint32_t z[NT];
};

// kMinCtas: CTAs per SM that the M <= 8 kernel must fit by registers (ptxas, nvcc 13.0, uncapped:
// ~71 registers at (NT, D) = (1, 4), 85 at (2, 4), 95 at (1, 8)); MT8 = 2 needs ~15 more, so
// three quarters of that count. At the caps some instances spill a few dozen bytes (ptxas -v):
// configuration 7 (72 registers) unless paired on fp16, configuration 4 (64) at MT8 = 2.
// MT8 = 4 (17-32 tokens, kPieceMt4Configs only) adds ~30 more (acc, part and X: 8 registers per
// token tile each): two thirds of the count, so that configuration 1's 8-warp CTAs still fit two
// per SM (128 registers) and a 256-CTA layer (4096 x 4096) one wave.
template <int MT8, int kMinCtas>
constexpr int PieceMinCtas() {
  return MT8 == 1   ? kMinCtas
         : MT8 == 2 ? (kMinCtas * 3 / 4 > 0 ? kMinCtas * 3 / 4 : 1)
                    : (kMinCtas * 2 / 3 > 0 ? kMinCtas * 2 / 3 : 1);
}

// kZp: zero points given (else the symmetric 8, folded into the decode constants at compile time).
// kPairedX: MMAs regrouped so that each B operand is an aligned register pair of one X load (see
// run_unit; PYQUANT_INT4_PIECE_PAIRED, the default since session 44).
template <typename T, int MT8, int NT, int kWarps, int D, int kMinCtas, bool kZp, bool kPairedX>
__global__ void __launch_bounds__(kWarps * 32, PieceMinCtas<MT8, kMinCtas>())
    int4_shuffled_piece_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b, const T* __restrict__ scales,
                               const uint8_t* __restrict__ zp, const T* __restrict__ bias, T* __restrict__ y,
                               Int4Geom g, bool weights_early) {
  using T2 = ShufT2<T>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gr = lane >> 2, tq = lane & 3;
  const int nt0 = blockIdx.x * NT;
  const int m0 = blockIdx.y * 8 * MT8;
  const int units = g.k / kPieceUnitK;
  const int my_units = warp < units ? (units - warp + kWarps - 1) / kWarps : 0;
  const int64_t ntt = g.n >> 4;

  // Weights: piece gr of tile (nt0 + j, 4 u + tq) at 128 (nt0 + j + ntt (4 u + tq)) + 16 gr;
  // this warp's units u = warp, warp + kWarps, ...
  const int64_t warp_step = kWarps * 4 * ntt * kInt4ShuffleTileBytes;
  const uint8_t* wl = b + (int64_t(nt0) + ntt * (tq + 4 * warp)) * kInt4ShuffleTileBytes + kInt4ShufflePieceBytes * gr;
  // Scales and zero points of rows 16 (nt0 + j) + gr + 8 h; unit u lies in block (64 u) >> bs_log2.
  const int blk_shift = g.bs_log2 - 6;
  const unsigned short* const sbits = reinterpret_cast<const unsigned short*>(scales);
  const int srow0 = (16 * nt0 + gr) * g.nb;  // scales: N * nb < 2^31 elements
  const int zrow0 = (16 * nt0 + gr) * g.zp_row_bytes;

  int next = 0;  // this warp's next unit to load (its index among the warp's units)
  auto load_next = [&](PieceSlot<NT>& sl) {
    if (next < my_units) {
#pragma unroll
      for (int j = 0; j < NT; ++j) sl.q[j] = LoadStream16(wl + j * kInt4ShuffleTileBytes);
      const int blk = (warp + kWarps * next) >> blk_shift;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int so = srow0 + 16 * j * g.nb + blk;
        sl.s[j] = uint32_t(__ldg(sbits + so)) | (uint32_t(__ldg(sbits + so + 8 * g.nb)) << 16);
        if constexpr (kZp) {
          // Int4ZeroPointAt's nibble select once for both rows' bytes (per row, it cost two more
          // registers and the 64-register instances spilled 48 bytes)
          const int zo = zrow0 + 16 * j * g.zp_row_bytes + (blk >> 1);
          sl.z[j] = uint32_t(__ldg(zp + zo)) | (uint32_t(__ldg(zp + zo + 8 * g.zp_row_bytes)) << 8);
          sl.z[j] = (blk & 1) ? (sl.z[j] >> 4) : sl.z[j];
        }
      }
    }
    ++next;
    wl += warp_step;
  };

  // X rows of this lane's B fragments: token m0 + 8 i + gr (clamped to M - 1: those columns are
  // never stored), k = 64 u + 16 tq.
  const T* xl[MT8];
#pragma unroll
  for (int i = 0; i < MT8; ++i) {
    const int tok = min(m0 + 8 * i + gr, g.m - 1);
    xl[i] = x + int64_t(tok) * g.k + 16 * tq + kPieceUnitK * warp;
  }
  constexpr int kXStep = kWarps * kPieceUnitK;
  // The 48- / 64-token instances keep only xl[0] (token tok0 = min(m0 + gr, M - 1)) and reach token
  // tile t at tok0 + min(8 t, x_last) (the same clamp, without 6 / 8 pointers in registers).
  const int x_last = g.m - 1 - min(m0 + gr, g.m - 1);

  PdlAllowDependents();
  if (!weights_early) PdlWaitPrimary();
  PieceSlot<NT> slot[D];
#pragma unroll
  for (int d = 0; d < D; ++d) load_next(slot[d]);
  if (weights_early) PdlWaitPrimary();  // X and Y only after the previous grid is complete

  float acc[NT][MT8][4];
  ZeroAcc(acc);
  // Tile j's decode constants: the rows' zero points (else the symmetric 8).
  auto row_constants = [&](const PieceSlot<NT>& sl, int j) {
    return kZp ? RowPairDecodeConstants<T>(T(), int(sl.z[j] & 0xFu), T(), int((sl.z[j] >> 8) & 0xFu))
               : RowPairDecodeConstants<T>(T(), kInt4SymmetricZeroPoint, T(), kInt4SymmetricZeroPoint);
  };
  // One unit from slot `sl` (then refilled D units ahead), X at xl + d units of this warp (d a
  // compile-time constant after unrolling: an immediate offset).
  auto run_unit = [&](PieceSlot<NT>& sl, int d) {
    if constexpr (MT8 >= kPieceStreamMinMt8) {
      // 48 / 64 tokens: the four decoded words (16 registers) stay while each token tile in turn loads
      // its X, runs its four MMAs (the paired grouping below) into one fp32 partial and adds it,
      // scaled, to its accumulator; per-tile X and partials, as below, would need ~100 more.
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const ShufRows<T> rows = row_constants(sl, j);
        uint32_t a[4][4];
#pragma unroll
        for (int w = 0; w < 4; ++w) DecodeShufWord<T, false>(Word(sl.q[j], w), rows, a[w]);
        const float2 sf = Float2Of(*reinterpret_cast<const T2*>(&sl.s[j]));  // rows gr, gr + 8
#pragma unroll
        for (int t = 0; t < MT8; ++t) {
          const T* xt = xl[0] + int64_t(min(8 * t, x_last)) * g.k + d * kXStep;
          const uint4 x0 = LoadCached16(xt), x1 = LoadCached16(xt + 8);
          float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int w = 0; w < 4; w += 2) {
            Mma16816<T>(part, a[w][0], a[w][1], a[w + 1][0], a[w + 1][1], Word(x0, w), Word(x0, w + 1));
            Mma16816<T>(part, a[w][2], a[w][3], a[w + 1][2], a[w + 1][3], Word(x1, w), Word(x1, w + 1));
          }
          acc[j][t][0] = fmaf(part[0], sf.x, acc[j][t][0]);
          acc[j][t][1] = fmaf(part[1], sf.x, acc[j][t][1]);
          acc[j][t][2] = fmaf(part[2], sf.y, acc[j][t][2]);
          acc[j][t][3] = fmaf(part[3], sf.y, acc[j][t][3]);
        }
      }
    } else {
      uint4 xv[MT8][2];
#pragma unroll
      for (int t = 0; t < MT8; ++t) {
        xv[t][0] = LoadCached16(xl[t] + d * kXStep);
        xv[t][1] = LoadCached16(xl[t] + d * kXStep + 8);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const ShufRows<T> rows = row_constants(sl, j);
        float part[MT8][4];
#pragma unroll
        for (int t = 0; t < MT8; ++t) part[t][0] = part[t][1] = part[t][2] = part[t][3] = 0.0f;
        if constexpr (kPairedX) {
          // Words w, w + 1 (w even) in two MMAs: the first takes their k = 2w.. and 2w + 2.. pairs
          // (a0 / a1 from word w, a2 / a3 from word w + 1), the second their k = 2w + 8.. and
          // 2w + 10.. pairs; then B is X's words w, w + 1 of one 16-byte load, an aligned register
          // pair of it (the layout above pairs words w of both loads, which costs moves).
#pragma unroll
          for (int w = 0; w < 4; w += 2) {
            uint32_t p[4], q[4];
            DecodeShufWord<T, false>(Word(sl.q[j], w), rows, p);
            DecodeShufWord<T, false>(Word(sl.q[j], w + 1), rows, q);
#pragma unroll
            for (int t = 0; t < MT8; ++t) {
              Mma16816<T>(part[t], p[0], p[1], q[0], q[1], Word(xv[t][0], w), Word(xv[t][0], w + 1));
              Mma16816<T>(part[t], p[2], p[3], q[2], q[3], Word(xv[t][1], w), Word(xv[t][1], w + 1));
            }
          }
        } else {
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            uint32_t a[4];
            DecodeShufWord<T, false>(Word(sl.q[j], w), rows, a);
#pragma unroll
            for (int t = 0; t < MT8; ++t)
              Mma16816<T>(part[t], a[0], a[1], a[2], a[3], Word(xv[t][0], w), Word(xv[t][1], w));
          }
        }
        const float2 sf = Float2Of(*reinterpret_cast<const T2*>(&sl.s[j]));  // rows gr, gr + 8
#pragma unroll
        for (int t = 0; t < MT8; ++t) {
          acc[j][t][0] = fmaf(part[t][0], sf.x, acc[j][t][0]);
          acc[j][t][1] = fmaf(part[t][1], sf.x, acc[j][t][1]);
          acc[j][t][2] = fmaf(part[t][2], sf.y, acc[j][t][2]);
          acc[j][t][3] = fmaf(part[t][3], sf.y, acc[j][t][3]);
        }
      }
    }
    load_next(sl);
  };
  int i = 0;
  for (; i + D <= my_units; i += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) run_unit(slot[d], d);
#pragma unroll
    for (int t = 0; t < MT8; ++t) xl[t] += D * kXStep;
  }
#pragma unroll
  for (int d = 0; d < D - 1; ++d) {  // the last my_units % D units
    if (i + d < my_units) run_unit(slot[d], d);
  }

  // The warps' partial tiles, summed in warp order: c[r] of lane (gr, tq) in tile j, token tile t
  // is row 16 (nt0 + j) + gr + 8 (r / 2), token m0 + 8 t + 2 tq + r % 2.
  constexpr int kE = NT * MT8 * 4;
  __shared__ float red[kWarps][kE][32];
  const float* a = &acc[0][0][0];
#pragma unroll
  for (int e = 0; e < kE; ++e) red[warp][e][lane] = a[e];
  __syncthreads();
  for (int idx = threadIdx.x; idx < kE * 32; idx += kWarps * 32) {
    const int e = idx >> 5, ln = idx & 31;
    const int j = e / (MT8 * 4), t = (e >> 2) % MT8, r = e & 3;
    const int tok = m0 + 8 * t + 2 * (ln & 3) + (r & 1);
    if (tok >= g.m) continue;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += red[w][e][ln];
    const int n = 16 * (nt0 + j) + (ln >> 2) + 8 * (r >> 1);
    y[int64_t(tok) * g.n + n] = StoreT<T>(bias ? v + LoadF(bias, n) : v);
  }
}

template <typename T, int MT8, int NT, int kWarps, int D, int kMinCtas>
cudaError_t LaunchPiece(bool paired, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y,
                        const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(g.n / (16 * NT)), static_cast<unsigned>((g.m + 8 * MT8 - 1) / (8 * MT8)));
  auto kernel = zp != nullptr ? int4_shuffled_piece_kernel<T, MT8, NT, kWarps, D, kMinCtas, true, true>
                              : int4_shuffled_piece_kernel<T, MT8, NT, kWarps, D, kMinCtas, false, true>;
  if constexpr (MT8 < kPieceStreamMinMt8) {  // the 48- / 64-token instances: the paired grouping only
    if (!paired) {
      kernel = zp != nullptr ? int4_shuffled_piece_kernel<T, MT8, NT, kWarps, D, kMinCtas, true, false>
                             : int4_shuffled_piece_kernel<T, MT8, NT, kWarps, D, kMinCtas, false, false>;
    }
  }
  return LaunchWithPdl(kernel, grid, dim3(32 * kWarps), stream, pdl.launch, x, b, s, zp, bias, y, g, pdl.weights_early);
}

// (NT, warps, D, CTAs per SM by registers) per configuration: kInt4ShuffledPieceVariantBase's
// comment (matmul_int4.h).
template <typename T, int MT8>
cudaError_t LaunchPieceMt(int config, bool paired, const T* x, const uint8_t* b, const T* s, const uint8_t* zp,
                          const T* bias, T* y, const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  switch (config) {
    case 1: return LaunchPiece<T, MT8, 1, 8, 4, 3>(paired, x, b, s, zp, bias, y, g, pdl, stream);
    case 2: return LaunchPiece<T, MT8, 1, 16, 4, 2>(paired, x, b, s, zp, bias, y, g, pdl, stream);
    case 3: return LaunchPiece<T, MT8, 1, 4, 8, 4>(paired, x, b, s, zp, bias, y, g, pdl, stream);
    case 4: return LaunchPiece<T, MT8, 1, 4, 3, 8>(paired, x, b, s, zp, bias, y, g, pdl, stream);
    case 5: return LaunchPiece<T, MT8, 2, 8, 4, 2>(paired, x, b, s, zp, bias, y, g, pdl, stream);
    case 6: return LaunchPiece<T, MT8, 2, 4, 4, 4>(paired, x, b, s, zp, bias, y, g, pdl, stream);
    case 7: return LaunchPiece<T, MT8, 1, 4, 4, 7>(paired, x, b, s, zp, bias, y, g, pdl, stream);
    default: return LaunchPiece<T, MT8, 1, 4, 4, 6>(paired, x, b, s, zp, bias, y, g, pdl, stream);
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchInt4ShufPiece(int config, bool paired, int sms, const T* x, const uint8_t* b, const T* s,
                                const uint8_t* zp, const T* bias, T* y, const Int4Geom& g, PdlMode pdl,
                                cudaStream_t stream) {
  if (g.k % kPieceUnitK != 0 || g.n % 128 != 0 || g.bs_log2 < 6 || g.m <= 0) return cudaErrorInvalidValue;
  if (config < 0) config = Int4ShuffledPieceDefaultConfig(g.n, g.m, sms);
  if (g.m <= 8) return LaunchPieceMt<T, 1>(config, paired, x, b, s, zp, bias, y, g, pdl, stream);
  // 17-32 tokens in one grid row of four token tiles (each decoded weight feeds four MMAs) where
  // instantiated; elsewhere two token tiles and grid.y = 2, which streams the weights twice. Two
  // units in flight, not four: at four, 128 registers spilled 84-474 bytes, at two 0-64 (ptxas,
  // nvcc 13.0, sm_90a).
  if (g.m > 32 && config == kInt4PieceWideConfig) {  // grid rows of 48 or 64 tokens
    const int64_t row_tokens = 8 * PieceWideMt8For(g.m);
    if ((g.m + row_tokens - 1) / row_tokens > 65535) return cudaErrorInvalidValue;
    return row_tokens == 8 * kPieceWide48Mt8
               ? LaunchPiece<T, kPieceWide48Mt8, 1, 8, kPieceWideUnits, 3>(paired, x, b, s, zp, bias, y, g, pdl, stream)
               : LaunchPiece<T, kPieceWideMt8, 1, 8, kPieceWideUnits, 3>(paired, x, b, s, zp, bias, y, g, pdl, stream);
  }
  if (g.m > 16 && g.m <= 32 && PieceMt4Config(config)) {
    return config == 1 ? LaunchPiece<T, 4, 1, 8, 2, 3>(paired, x, b, s, zp, bias, y, g, pdl, stream)
                       : LaunchPiece<T, 4, 1, 16, 2, 2>(paired, x, b, s, zp, bias, y, g, pdl, stream);
  }
  if (int64_t(g.m + 15) / 16 > 65535) return cudaErrorInvalidValue;
  return LaunchPieceMt<T, 2>(config, paired, x, b, s, zp, bias, y, g, pdl, stream);
}

template cudaError_t LaunchInt4ShufPiece<__half>(int, bool, int, const __half*, const uint8_t*, const __half*,
                                                 const uint8_t*, const __half*, __half*, const Int4Geom&, PdlMode,
                                                 cudaStream_t);
template cudaError_t LaunchInt4ShufPiece<__nv_bfloat16>(int, bool, int, const __nv_bfloat16*, const uint8_t*,
                                                        const __nv_bfloat16*, const uint8_t*, const __nv_bfloat16*,
                                                        __nv_bfloat16*, const Int4Geom&, PdlMode, cudaStream_t);

}  // namespace pyquant
