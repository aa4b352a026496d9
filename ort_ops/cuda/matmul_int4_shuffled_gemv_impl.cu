// MatMulInt4's CUDA-core GEMV on the shuffled weight order (layout/int4_shuffled.h), M <=
// kInt4ShuffledGemvMaxM: its kernel, its configurations and their launcher LaunchInt4ShufGemv
// (matmul_int4_shuffled_impl.cuh), which LaunchMatMulInt4Shuffled (matmul_int4_shuffled_impl.cu)
// calls where the dispatch picks the GEMV. Kept apart from that file, as the piece and wide mma
// kernels are, so that each translation unit holds one kernel family.
//
// Preconditions (the caller's): T = __half / __nv_bfloat16, N % 128 == 0, K % 64 == 0,
// block_size in {64, 128, 256}, 16-byte aligned X, M <= kInt4ShuffledGemvMaxM.
#include <algorithm>

#include "cuda/matmul_int4.h"
#include "cuda/matmul_int4_impl.cuh"
#include "cuda/matmul_int4_shuffled_impl.cuh"
#include "cuda/pdl.h"
#include "layout/int4_shuffled.h"

namespace pyquant {

using namespace cuda_detail;

namespace {

// Scale and zero point of row `row`, block blk.
template <typename T>
__device__ __forceinline__ void RowBlock(const T* __restrict__ scales, const uint8_t* __restrict__ zp,
                                         const Int4Geom& g, int row, int blk, float* s, int* z) {
  *s = LoadF(scales, int64_t(row) * g.nb + blk);
  *z = zp ? Int4ZeroPointAt(zp + int64_t(row) * g.zp_row_bytes, blk) : kInt4SymmetricZeroPoint;
}

// ---------------------------------------------------------------------------------------------
// The CUDA-core GEMV (M <= 4). grid = (N / (16 kTiles)) * (8 / kP), block = kThreads.
// A CTA owns pieces p_off .. p_off + kP - 1 (rows p and p + 8 of each) of kTiles n16 tiles; thread t
// owns piece p = p_off + t % kP (rows r0 = 16 nt + p, r1 = r0 + 8) in the units (kU consecutive
// k-tiles, inside one block) u = t / kP + i * kThreads / kP, i = 0, 1, ...: a warp's 16-byte loads
// cover 32 / kP k-tiles x 16 kP contiguous bytes (whole 32-byte sectors). A unit's kU * kTiles
// loads are issued together, the next unit's before the current one's arithmetic (bytes in flight
// per SM set the streaming rate), and its scales, zero points and decode constants are read once
// (a first version took one piece per block, with its scales, and ran at 53-69 % of the floor
// against the row-major GEMV's 56-82 %: 2026-11-24-h100-s9-shufvariants-bench-cuda.md). kP < 8
// gives more, smaller CTAs (4096 x 4096: 256 CTAs at kP = 8 is 2 per SM). X's 16 activations of
// a k-tile (two 16-byte L1 loads per token) serve the thread's 2 kTiles rows.
// ---------------------------------------------------------------------------------------------

// The 16 activations of token m at k-tile kt as pairs: xp[0][w] = (x[2w], x[2w + 1]),
// xp[1][w] = (x[2w + 8], x[2w + 9]).
template <typename T>
__device__ __forceinline__ void LoadShufX(const T* __restrict__ x, const Int4Geom& g, int m, int kt,
                                          ShufT2<T> (&xp)[2][4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint4 v = LoadCached16(x + int64_t(m) * g.k + kt * 16 + 8 * h);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t word = Word(v, w);
      xp[h][w] = *reinterpret_cast<const ShufT2<T>*>(&word);
    }
  }
}

// One piece's weights as pairs: wr[r][h][w] = row r0 / r1 at the pairs of xp[h][w].
template <typename T, bool kScaled>
__device__ __forceinline__ void DecodeShufPiece(const uint4& q, const ShufRows<T>& rows, ShufT2<T> (&wr)[2][2][4]) {
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    uint32_t d[4];
    DecodeShufWord<T, kScaled>(Word(q, w), rows, d);
    wr[0][0][w] = *reinterpret_cast<const ShufT2<T>*>(&d[0]);
    wr[1][0][w] = *reinterpret_cast<const ShufT2<T>*>(&d[1]);
    wr[0][1][w] = *reinterpret_cast<const ShufT2<T>*>(&d[2]);
    wr[1][1][w] = *reinterpret_cast<const ShufT2<T>*>(&d[3]);
  }
}

// One unit (kU k-tiles) of a GEMV thread's kTiles pieces q against X, the fast path: fp32 partial
// sums per (token, tile, row) of unscaled chains, then acc += part * s (the block's scales);
// `slow` is set where a partial sum is not finite (the caller redoes the thread with scaled weights).
template <typename T, int kM, int kTiles, int kU>
__device__ __forceinline__ void ShufGemvUnit(const T* __restrict__ x, const Int4Geom& g, int unit,
                                             const uint4 (&q)[kU][kTiles], const ShufRows<T> (&rows)[kTiles],
                                             const float (&s)[kTiles][2], float (&acc)[kM][kTiles][2], bool& slow) {
  using T2 = ShufT2<T>;
  float part[kM][kTiles][2];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int j = 0; j < kTiles; ++j) part[m][j][0] = part[m][j][1] = 0.0f;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int kt = unit * kU + u;
    T2 xp[kM][2][4];
#pragma unroll
    for (int m = 0; m < kM; ++m) LoadShufX<T>(x, g, m, kt, xp[m]);
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      T2 wr[2][2][4];
      DecodeShufPiece<T, false>(q[u][j], rows[j], wr);
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int r = 0; r < 2; ++r) part[m][j][r] += ChainSum(wr[r][0], xp[m][0]) + ChainSum(wr[r][1], xp[m][1]);
    }
  }
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        slow |= !isfinite(part[m][j][r]);
        acc[m][j][r] = fmaf(part[m][j][r], s[j][r], acc[m][j][r]);
      }
}

// kMinBlocks: CTAs per SM that the M = 1 kernel must fit by registers (__launch_bounds__; M
// tokens: kMinBlocks / M, whose sums need the registers). Uncapped, ptxas (nvcc 13.0) gives the
// M = 1 kernel 167 registers (kTiles = 1) or 255 (kTiles = 2): 3 or 2 CTAs of 128 threads per SM.
// kD > 0 (chunk mode, configurations 16 / 18, the M = 1 default on N <= 8448 since session 48): the
// thread's units come in chunks of kD whose loads (weights, and the unit's scales and zero points
// with them) are all issued together, the first chunk before the PDL wait and the next after the
// current one's arithmetic. At kD = 1 that is configurations 8 / 10 with the scales fetched beside
// the weights, not after them: without it each unit's RowBlock loads are an L2 round trip between
// the weights' arrival and the arithmetic, which 8-16 warps per SM do not hide as configuration
// 12's 28 do. H200, gemv_micro, M = 1, us, kD = 0 -> 1: 14336 x 4096 (512 threads) 10.54 -> 9.67;
// 8192^2 (256 threads) 12.37 -> 10.94; 4096^2 (512) 4.18 -> 4.17. Measured and removed: kD = 2 / 4
// (configurations 15 / 17 of session 47: 128 threads, 4 and 6 CTAs per SM; then 7 CTAs, kD = 1 / 2,
// and 8 CTAs, kD = 2), whose register caps cost the one-wave grid on 4096 x 14336 or spilled:
// 4096 x 14336 10.20-13.62 against configuration 12's 9.81-9.89, and slower on the other layers
// (bench/results/2026-11-29-h200-s48-chunk-gemvmicro.log, …-s48-m2chunk-gemvmicro.log).
template <typename T, int kM, int kP, int kTiles, int kThreads, int kU, int kMinBlocks = 1, int kD = 0>
__global__ void __launch_bounds__(kThreads, kMinBlocks / kM > 0 ? kMinBlocks / kM : 1)
    int4_shuffled_gemv_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b, const T* __restrict__ scales,
                              const uint8_t* __restrict__ zp, const T* __restrict__ bias, T* __restrict__ y, Int4Geom g,
                              bool weights_early) {
  using T2 = ShufT2<T>;
  static_assert(kP == 2 || kP == 4 || kP == 8, "pieces per CTA tile");
  static_assert(kU == 2 || kU == 4, "a unit of kU k-tiles must lie in one block (block_size >= 64)");
  constexpr int kGroups = kThreads / kP;  // thread groups along K
  const int p_off = (blockIdx.x % (8 / kP)) * kP;
  const int p = p_off + threadIdx.x % kP;
  const int grp = threadIdx.x / kP;
  const int nt0 = (blockIdx.x / (8 / kP)) * kTiles;
  const int ntt = g.n >> 4;
  const int units = (g.k >> 4) / kU;  // K % 64 == 0
  const int my_units = grp < units ? (units - grp + kGroups - 1) / kGroups : 0;

  float acc[kM][kTiles][2];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int j = 0; j < kTiles; ++j) acc[m][j][0] = acc[m][j][1] = 0.0f;

  // Unit i of this thread (clamped to its last: unconditional loads stay hoisted; extra units are
  // never used); its k-tiles are unit * kU .. + kU - 1.
  auto unit_of = [&](int i) { return grp + kGroups * min(i, max(my_units - 1, 0)); };
  auto piece_ptr = [&](int j, int kt) {
    return b + (int64_t(nt0 + j) + int64_t(ntt) * kt) * kInt4ShuffleTileBytes + kInt4ShufflePieceBytes * p;
  };
  bool slow = false;
  // Scales and zero points of unit `unit`: s[j][r] / z[j][r] of tile j's row 16 (nt0 + j) + p + 8 r.
  auto load_scales = [&](int unit, float (&s)[kTiles][2], int (&z)[kTiles][2]) {
    const int blk = (unit * kU * 16) >> g.bs_log2;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      RowBlock(scales, zp, g, 16 * (nt0 + j) + p, blk, &s[j][0], &z[j][0]);
      RowBlock(scales, zp, g, 16 * (nt0 + j) + p + 8, blk, &s[j][1], &z[j][1]);
    }
  };
  if constexpr (kD == 0) {
    PdlAllowDependents();
    if (!weights_early) PdlWaitPrimary();
    uint4 cur[kU][kTiles];
    if (my_units > 0) {
      const int u0 = unit_of(0);
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int j = 0; j < kTiles; ++j) cur[u][j] = LoadStream16(piece_ptr(j, u0 * kU + u));
    }
    if (weights_early) PdlWaitPrimary();
    for (int i = 0; i < my_units; ++i) {
      const int unit = unit_of(i);
      uint4 nxt[kU][kTiles];
      if (i + 1 < my_units) {
        const int un = unit_of(i + 1);
#pragma unroll
        for (int u = 0; u < kU; ++u)
#pragma unroll
          for (int j = 0; j < kTiles; ++j) nxt[u][j] = LoadStream16(piece_ptr(j, un * kU + u));
      }
      float s[kTiles][2];
      int z[kTiles][2];
      load_scales(unit, s, z);
      ShufRows<T> rows[kTiles];
#pragma unroll
      for (int j = 0; j < kTiles; ++j) rows[j] = MakeShufRows<T>(s[j][0], z[j][0], s[j][1], z[j][1]);
      ShufGemvUnit<T, kM, kTiles, kU>(x, g, unit, cur, rows, s, acc, slow);
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int j = 0; j < kTiles; ++j) cur[u][j] = nxt[u][j];
    }
  } else {
    // chunk mode: units i0 .. i0 + kD - 1 of this thread (those past my_units load nothing)
    uint4 wq[kD][kU][kTiles];
    float cs[kD][kTiles][2];
    int cz[kD][kTiles][2];
    auto load_chunk = [&](int i0) {
#pragma unroll
      for (int d = 0; d < kD; ++d) {
        const bool in = i0 + d < my_units;
        const int unit = grp + kGroups * (in ? i0 + d : 0);
#pragma unroll
        for (int j = 0; j < kTiles; ++j)
#pragma unroll
          for (int u = 0; u < kU; ++u)
            wq[d][u][j] = in ? LoadStream16(piece_ptr(j, unit * kU + u)) : make_uint4(0, 0, 0, 0);
        if (in) {
          load_scales(unit, cs[d], cz[d]);
        } else {
#pragma unroll
          for (int j = 0; j < kTiles; ++j) {
            cs[d][j][0] = cs[d][j][1] = 0.0f;
            cz[d][j][0] = cz[d][j][1] = kInt4SymmetricZeroPoint;
          }
        }
      }
    };
    PdlAllowDependents();
    if (!weights_early) PdlWaitPrimary();
    if (my_units > 0) load_chunk(0);
    if (weights_early) PdlWaitPrimary();
    for (int i0 = 0; i0 < my_units; i0 += kD) {
#pragma unroll
      for (int d = 0; d < kD; ++d) {
        if (i0 + d < my_units) {
          const int unit = grp + kGroups * (i0 + d);
          ShufRows<T> rows[kTiles];
#pragma unroll
          for (int j = 0; j < kTiles; ++j)
            rows[j] = MakeShufRows<T>(cs[d][j][0], cz[d][j][0], cs[d][j][1], cz[d][j][1]);
          ShufGemvUnit<T, kM, kTiles, kU>(x, g, unit, wq[d], rows, cs[d], acc, slow);
        }
      }
      if (i0 + kD < my_units) load_chunk(i0 + kD);
    }
  }

  if (slow) {  // rare (|x| large enough to overflow an unscaled T chain): this thread again, scaled weights
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int j = 0; j < kTiles; ++j) acc[m][j][0] = acc[m][j][1] = 0.0f;
    for (int i = 0; i < my_units; ++i) {
      const int unit = unit_of(i);
      const int blk = (unit * kU * 16) >> g.bs_log2;
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        float s[2];
        int z[2];
        RowBlock(scales, zp, g, 16 * (nt0 + j) + p, blk, &s[0], &z[0]);
        RowBlock(scales, zp, g, 16 * (nt0 + j) + p + 8, blk, &s[1], &z[1]);
        const ShufRows<T> rows = MakeShufRows<T>(s[0], z[0], s[1], z[1]);
        for (int u = 0; u < kU; ++u) {
          const int kt = unit * kU + u;
          T2 wr[2][2][4];
          DecodeShufPiece<T, true>(LoadStream16(piece_ptr(j, kt)), rows, wr);
#pragma unroll
          for (int m = 0; m < kM; ++m) {
            T2 xp[2][4];
            LoadShufX<T>(x, g, m, kt, xp);
#pragma unroll
            for (int r = 0; r < 2; ++r) acc[m][j][r] += ShortChainSum(wr[r][0], xp[0]) + ShortChainSum(wr[r][1], xp[1]);
          }
        }
      }
    }
  }

  // Threads with the same piece p (lanes equal modulo kP) hold the same rows: shuffle-sum over the
  // lane bits above kP, then the kThreads / 32 warps through shared memory.
  constexpr int kV = kM * kTiles * 2;
  __shared__ float red[kThreads / 32][kP][kV];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* a = &acc[0][0][0];
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    float v = a[i];
#pragma unroll
    for (int o = kP; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane < kP) red[warp][lane][i] = v;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kP * kV; e += kThreads) {
    const int pp = e / kV, i = e % kV;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) v += red[w][pp][i];
    const int m = i / (kTiles * 2), j = (i / 2) % kTiles, r = i & 1;
    const int n = 16 * (nt0 + j) + p_off + pp + 8 * r;
    y[int64_t(m) * g.n + n] = StoreT<T>(bias ? v + LoadF(bias, n) : v);
  }
}

template <typename T, int kP, int kTiles, int kThreads, int kU, int kMinBlocks = 1, int kD = 0>
void LaunchShufGemv(const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y, const Int4Geom& g,
                    PdlMode pdl, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(g.n / (16 * kTiles) * (8 / kP)));
  auto kernel = int4_shuffled_gemv_kernel<T, 1, kP, kTiles, kThreads, kU, kMinBlocks, kD>;
  if (g.m == 2) kernel = int4_shuffled_gemv_kernel<T, 2, kP, kTiles, kThreads, kU, kMinBlocks, kD>;
  if (g.m == 3) kernel = int4_shuffled_gemv_kernel<T, 3, kP, kTiles, kThreads, kU, kMinBlocks, kD>;
  if (g.m == 4) kernel = int4_shuffled_gemv_kernel<T, 4, kP, kTiles, kThreads, kU, kMinBlocks, kD>;
  (void)LaunchWithPdl(kernel, grid, dim3(kThreads), stream, pdl.launch, x, b, s, zp, bias, y, g, pdl.weights_early);
}

}  // namespace

template <typename T>
cudaError_t LaunchInt4ShufGemv(int config, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias,
                               T* y, const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  // (kP, kTiles, threads, kU[, min CTAs]) per configuration: the comment above
  // kInt4ShuffledGemvVariantBase.
  switch (config) {
    case 1: LaunchShufGemv<T, 8, 1, 128, 4>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 2: LaunchShufGemv<T, 2, 1, 128, 4>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 3: LaunchShufGemv<T, 4, 2, 128, 4>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 4: LaunchShufGemv<T, 8, 2, 128, 4>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 5: LaunchShufGemv<T, 8, 1, 128, 4, kInt4ShufGemvCtasPerSm128>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 8: LaunchShufGemv<T, 8, 1, 256, 4, kInt4ShufGemvCtasPerSm256>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 10: LaunchShufGemv<T, 8, 1, 512, 4, kInt4ShufGemvCtasPerSm512>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 12: LaunchShufGemv<T, 8, 1, 128, 4, kInt4ShufGemvCtasPerSm128M1>(x, b, s, zp, bias, y, g, pdl, stream); break;
    // chunk mode (kD = 1 unit per chunk): configurations 8 / 10 with the next unit's loads
    // issued after the current unit's arithmetic (the M = 1 default, session 48)
    case 16: LaunchShufGemv<T, 8, 1, 256, 4, kInt4ShufGemvCtasPerSm256, 1>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 18: LaunchShufGemv<T, 8, 1, 512, 4, kInt4ShufGemvCtasPerSm512, 1>(x, b, s, zp, bias, y, g, pdl, stream); break;
    default: LaunchShufGemv<T, 4, 1, 128, 4>(x, b, s, zp, bias, y, g, pdl, stream);
  }
  return cudaGetLastError();
}

template cudaError_t LaunchInt4ShufGemv<__half>(int, const __half*, const uint8_t*, const __half*, const uint8_t*,
                                                const __half*, __half*, const Int4Geom&, PdlMode, cudaStream_t);
template cudaError_t LaunchInt4ShufGemv<__nv_bfloat16>(int, const __nv_bfloat16*, const uint8_t*, const __nv_bfloat16*,
                                                       const uint8_t*, const __nv_bfloat16*, __nv_bfloat16*,
                                                       const Int4Geom&, PdlMode, cudaStream_t);

}  // namespace pyquant
