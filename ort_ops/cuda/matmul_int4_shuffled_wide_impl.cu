// MatMulInt4: the wide shared-memory mma kernel on the shuffled weight order
// (layout/int4_shuffled.h), for small and medium M on a node whose B the op rewrote in place.
//
// Why: the register mma kernel of matmul_int4_shuffled_impl.cu gives a CTA 64 weight rows and all
// of K, so every CTA reads all of X from L2: at M = 16 on 4096 x 14336 that is 224 CTAs x 128 KB,
// as many bytes as the weights themselves, and its time grows with M (H100: 15.0 us at M = 8,
// 20.1 at 16, 23.8 at 32 against a weight floor near 10 us;
// bench/results/2026-11-24-h100-s9-shufvariants2-bench-cuda.md). Here a CTA owns 128 * NT rows and
// one K slice, stages X's chunk once in shared memory for its 8 warps, and splits K across a
// cluster instead, which cuts the L2 -> SM traffic of X by 2 * NT * kS / kS = 2 * NT times per
// row block while keeping enough CTAs in flight.
//
// One CTA: 8 warps; warp w owns the n16 tiles nt0 + NT w .. nt0 + NT w + NT - 1 (rows
// 16 nt .. 16 nt + 15) and all 8 * MT8 tokens of the CTA (m0 .. m0 + 8 MT8 - 1). Per 64-wide
// K chunk c (4 k16 steps; block_size >= 64, so one scale per row and chunk), one pipeline stage:
//
//   W stage: [step u = 0..3][tile t = 0 .. 8 NT - 1][128 bytes]  (the CTA's 8 NT tiles of a step
//            are contiguous in the shuffled order: 8 NT * 128 bytes from byte
//            128 * (nt0 + N / 16 * (4 c + u)), copied as 16-byte cp.async pieces)
//   X stage: [token t = 0 .. 8 MT8 - 1][128 bytes = 64 k], the 16-byte column chunk ch of token t
//            stored at chunk position ch ^ (t % 8) (XOR swizzle: the 8 row addresses of an
//            ldmatrix hit 8 different bank groups); tokens >= M are zero-filled.
//   S, Z:    the scale (float) and zero point (byte) of the CTA's 128 NT rows for the chunk's
//            block, stored by threads from plain loads (see the mainloop).
//
// Per k16 step u a lane reads its A word of tile j (word lane of the tile: 32-bit, conflict-free),
// decodes it (DecodeShufWord, scaled, like the register kernel), and runs MT8 mma.sync m16n8k16
// against B fragments of 8 tokens each from ldmatrix.x4 (two token tiles per instruction).
// kStages stages in flight (cp.async groups), one barrier per chunk.
//
// K split: cluster rank r of kS takes chunks [r C / kS, (r + 1) C / kS), C = K / 64. After the
// mainloop each CTA writes its fp32 partial tile [8 MT8 tokens][128 NT rows] to shared memory
// (the pipeline's bytes, reused); rank r then sums slice r of the tile over ranks 0 .. kS - 1 in
// that order (distributed shared memory), adds the bias and stores Y: the same sum order on every
// run, so results are bit-reproducible.
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/device_info.h"
#include "cuda/matmul_int4.h"
#include "cuda/matmul_int4_shuffled_impl.cuh"
#include "cuda/staged_common.cuh"  // SetFuncAttributeOnce
#include "layout/int4_shuffled.h"

namespace pyquant {

using namespace cuda_detail;

namespace {

constexpr int kWideWarps = 8;
constexpr int kWideThreads = 32 * kWideWarps;
constexpr int kWideChunkK = 64;  // 4 k16 steps
constexpr int kWideSteps = kWideChunkK / 16;

template <int NT, int MT8>
struct WideSmem {
  static constexpr int kRows = 128 * NT;                     // weight rows per CTA
  static constexpr int kTokens = 8 * MT8;                    // tokens per CTA
  static constexpr int kWBytes = kWideSteps * kRows * 8;     // 4 steps x 8 NT tiles x 128 bytes
  static constexpr int kXBytes = kTokens * kWideChunkK * 2;  // T is 2 bytes
  static constexpr int kSBytes = kRows * 4;                  // the rows' scales (float)
  static constexpr int kZBytes = kRows;                      // and zero points (one byte each)
  static constexpr int kStageBytes = kWBytes + kXBytes + kSBytes + kZBytes;
  static constexpr int kPartStride = kRows + 4;  // fp32 words per token row (+4: banks)
  static constexpr int kPartBytes = kTokens * kPartStride * 4;
};

// (Ldmatrix4: matmul_int4_impl.cuh)
__device__ __forceinline__ void Ldmatrix2(uint32_t (&r)[2], const void* smem) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}
__device__ __forceinline__ uint32_t Lds32(const void* smem) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
  return v;
}

// x [M, K] T (16-byte aligned rows), b shuffled [N * K / 2], scales [N, nb] T, zp [N, zp_row_bytes]
// or nullptr, bias [N] T or nullptr, y [M, N] T. grid = ((N / (128 NT)) * kS, ceil(M / (8 MT8))),
// cluster (kS, 1, 1), block 256, dynamic shared memory max(kStages * stage, partial tile).
template <typename T, int MT8, int NT, int kS, int kStages>
__global__ void __launch_bounds__(kWideThreads)
    int4_shuffled_wide_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b, const T* __restrict__ scales,
                              const uint8_t* __restrict__ zp, const T* __restrict__ bias, T* __restrict__ y, Int4Geom g,
                              bool weights_early) {
  using S = WideSmem<NT, MT8>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gr = lane >> 2;
  const int rank = kS > 1 ? static_cast<int>(blockIdx.x % kS) : 0;
  const int nt0 = static_cast<int>(blockIdx.x / kS) * (8 * NT);  // the CTA's first n16 tile
  const int m0 = blockIdx.y * S::kTokens;
  const int ntt = g.n >> 4;
  const int chunks = g.k / kWideChunkK;
  const int c_begin = static_cast<int>((int64_t(chunks) * rank) / kS);
  const int c_end = static_cast<int>((int64_t(chunks) * (rank + 1)) / kS);
  const int n_my = c_end - c_begin;

  // Stage s of chunk c: weights, then X.
  auto w_stage = [&](int s) { return smem + s * S::kStageBytes; };
  auto x_stage = [&](int s) { return smem + s * S::kStageBytes + S::kWBytes; };
  auto s_stage = [&](int s) { return reinterpret_cast<float*>(smem + s * S::kStageBytes + S::kWBytes + S::kXBytes); };
  auto z_stage = [&](int s) { return smem + s * S::kStageBytes + S::kWBytes + S::kXBytes + S::kSBytes; };
  auto load_w = [&](int c, int s) {
    uint8_t* dst = w_stage(s);
    constexpr int kPieces = S::kWBytes / 16;  // per stage
#pragma unroll
    for (int i = tid; i < kPieces; i += kWideThreads) {
      const int u = i / (S::kRows / 2), off = (i % (S::kRows / 2)) * 16;  // 8 NT tiles * 128 B / 16
      const uint8_t* src = b + (int64_t(nt0) + int64_t(ntt) * (c * kWideSteps + u)) * kInt4ShuffleTileBytes + off;
      CpAsync16(dst + i * 16, src, true);
    }
  };
  auto load_x = [&](int c, int s) {
    uint8_t* dst = x_stage(s);
    constexpr int kPieces = S::kTokens * 8;  // 8 16-byte chunks per token row
#pragma unroll
    for (int i = tid; i < kPieces; i += kWideThreads) {
      const int t = i >> 3, ch = i & 7;
      const int tok = m0 + t;
      const bool valid = tok < g.m;
      const T* src = x + int64_t(valid ? tok : 0) * g.k + c * kWideChunkK + ch * 8;
      CpAsync16(dst + t * 128 + ((ch ^ (t & 7)) << 4), src, valid);
    }
  };

  float acc[NT][MT8][4];
  ZeroAcc(acc);

  // Prologue: kStages - 1 chunks in flight (weights early only when constant).
  PdlPipelinePrologue<kStages>(
      n_my, weights_early, [&](int p) { load_w(c_begin + p, p); }, [&](int p) { load_x(c_begin + p, p); });

  // Scales and zero points: thread t < kRows loads row 16 nt0 + t's raw scale (T) and zero-point
  // byte for a chunk's block with plain loads (2-byte scales and nibbles do not suit cp.async),
  // keeps them kD iterations in one of kD register slots, and only then converts and stores them
  // into the chunk's stage (at the iteration before the chunk is used). Nothing reads a loaded
  // value earlier, so the loads' DRAM latency hides behind kD chunk iterations. (Written when the
  // ~1 us per chunk of the first two versions, 2026-11-24-h100-s10-wide-bench-cuda.md, was blamed
  // on these loads; it did not change that time, …-s11-wide3-bench-cuda.md: Nsight Compute shows
  // the kernel issue-bound on 8 warps per SM, …-s11-wide3-ncu-m1.txt.)
  // kD is independent of kStages (chunk c's scales go into c's stage at iteration c - 1, after
  // the barrier that freed it); 4 slots = 4 chunk iterations of latency cover, 8 registers.
  constexpr int kD = 4;
  const bool row_loader = tid < S::kRows;
  const int my_row = 16 * nt0 + tid;
  struct RawRow {
    T s;
    uint8_t zb;
  };
  auto load_raw = [&](int c, RawRow* r) {
    if (row_loader) {
      const int blk = (c * kWideChunkK) >> g.bs_log2;
      r->s = scales[int64_t(my_row) * g.nb + blk];
      r->zb = zp ? zp[int64_t(my_row) * g.zp_row_bytes + (blk >> 1)] : uint8_t{0};
    }
  };
  auto store_raw = [&](int c, const RawRow& r) {
    if (row_loader) {
      const int blk = (c * kWideChunkK) >> g.bs_log2;
      const int stage = (c - c_begin) % kStages;
      s_stage(stage)[tid] = LoadF(&r.s, 0);
      // the loaded byte is byte blk / 2 of the row: Int4ZeroPointAt picks block blk's nibble
      z_stage(stage)[tid] = static_cast<uint8_t>(zp ? Int4ZeroPointAt(&r.zb, blk & 1) : kInt4SymmetricZeroPoint);
    }
  };
  RawRow pend[kD];  // at the top of iteration i: chunk c_begin + i + 1's in pend[i % kD]
  {
    RawRow first{};
    if (n_my > 0) {
      load_raw(c_begin, &first);
      store_raw(c_begin, first);  // the first chunk waits once
    }
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      pend[d] = RawRow{};
      if (1 + d < n_my) load_raw(c_begin + 1 + d, &pend[d]);
    }
  }

  // ldmatrix row address of this lane within a token pair-tile: matrix lane / 8 = (token half,
  // k half), row lane % 8.
  const int lm_tok = ((lane >> 4) << 3) + (lane & 7);  // 0..15
  const int lm_khalf = (lane >> 3) & 1;

  // One chunk iteration. slot = pend[i % kD], a compile-time index in the unrolled loop below,
  // so a loaded value is never moved between registers before its use (a move would wait for
  // the load just like a use does).
  auto chunk_step = [&](int i, RawRow& slot) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // chunk i landed for all threads; stage (i - 1) % kStages is free again
    {
      const int p = i + kStages - 1;
      if (p < n_my) {
        load_w(c_begin + p, p % kStages);
        load_x(c_begin + p, p % kStages);
      }
      CpAsyncCommit();
    }
    // Chunk i + 1's scales (in slot since iteration i - kD) into its stage (which chunk
    // i + 1 - kStages left at iteration <= i - 1, before this iteration's barrier; read at
    // iteration i + 1, after the next), then chunk i + 1 + kD's loads into the same slot.
    if (i + 1 < n_my) store_raw(c_begin + i + 1, slot);
    if (i + 1 + kD < n_my) load_raw(c_begin + i + 1 + kD, &slot);
    ShufRows<T> rows[NT];
    {
      const float* ss = s_stage(i % kStages);
      const uint8_t* zs = z_stage(i % kStages);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int r0 = 16 * (warp * NT + j) + gr;
        rows[j] = MakeShufRows<T>(ss[r0], zs[r0], ss[r0 + 8], zs[r0 + 8]);
      }
    }

    const uint8_t* ws = w_stage(i % kStages);
    const uint8_t* xs = x_stage(i % kStages);
#pragma unroll
    for (int u = 0; u < kWideSteps; ++u) {
      uint32_t xb[MT8][2];
      if constexpr (MT8 == 1) {
        const int t = lane & 7;
        Ldmatrix2(xb[0], xs + t * 128 + (((2 * u + lm_khalf) ^ t) << 4));
      } else {
#pragma unroll
        for (int pt = 0; pt < MT8 / 2; ++pt) {
          const int t = 16 * pt + lm_tok;
          uint32_t r[4];
          Ldmatrix4(r, xs + t * 128 + (((2 * u + lm_khalf) ^ (t & 7)) << 4));
          xb[2 * pt][0] = r[0];
          xb[2 * pt][1] = r[1];
          xb[2 * pt + 1][0] = r[2];
          xb[2 * pt + 1][1] = r[3];
        }
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint32_t q = Lds32(ws + (u * 8 * NT + warp * NT + j) * kInt4ShuffleTileBytes + 4 * lane);
        uint32_t a[4];
        DecodeShufWord<T, true>(q, rows[j], a);
#pragma unroll
        for (int mi = 0; mi < MT8; ++mi) Mma16816<T>(acc[j][mi], a[0], a[1], a[2], a[3], xb[mi][0], xb[mi][1]);
      }
    }
  };
#pragma unroll 1
  for (int i0 = 0; i0 < n_my; i0 += kD) {
#pragma unroll
    for (int d = 0; d < kD; ++d)
      if (i0 + d < n_my) chunk_step(i0 + d, pend[d]);
  }
  CpAsyncWait<0>();
  __syncthreads();  // every warp is done with the pipeline's shared memory

  // Partial tile part[token][row] (fp32) over the pipeline's bytes. Accumulator r of (j, mi):
  // row 16 (warp NT + j) + gr + 8 (r >= 2), token 8 mi + 2 (lane % 4) + (r % 2).
  float* part = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int mi = 0; mi < MT8; ++mi)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = 16 * (warp * NT + j) + gr + (r >= 2 ? 8 : 0);
        const int tok = 8 * mi + 2 * (lane & 3) + (r & 1);
        part[tok * S::kPartStride + row] = acc[j][mi][r];
      }

  // Rank r stores tokens-major slice r of the tile's kTokens * kRows outputs (consecutive threads:
  // consecutive rows, so the Y stores coalesce).
  constexpr int kElems = S::kTokens * S::kRows;
  const int e_begin = (kElems / kS) * rank, e_end = e_begin + kElems / kS;  // kRows % kS == 0
  const int row0 = 16 * nt0;
  if constexpr (kS == 1) {
    __syncthreads();
    for (int e = e_begin + tid; e < e_end; e += kWideThreads) {
      const int tok = e / S::kRows, row = e % S::kRows;
      if (m0 + tok >= g.m) continue;
      float v = part[tok * S::kPartStride + row];
      if (bias) v += LoadF(bias, row0 + row);
      y[int64_t(m0 + tok) * g.n + row0 + row] = StoreT<T>(v);
    }
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every rank's partial tile is written
    for (int e = e_begin + tid; e < e_end; e += kWideThreads) {
      const int tok = e / S::kRows, row = e % S::kRows;
      if (m0 + tok >= g.m) continue;
      float v = 0.0f;
#pragma unroll
      for (int q = 0; q < kS; ++q) v += cluster.map_shared_rank(part, q)[tok * S::kPartStride + row];
      if (bias) v += LoadF(bias, row0 + row);
      y[int64_t(m0 + tok) * g.n + row0 + row] = StoreT<T>(v);
    }
    cluster.sync();  // no rank exits while another still reads its shared memory
#endif
  }
}

template <typename T, int MT8, int NT, int kS>
cudaError_t LaunchWide(const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y,
                       const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  using S = WideSmem<NT, MT8>;
  // Small M streams weights: more stages in flight (bytes in flight per SM set the rate).
  constexpr int kStages = MT8 <= 2 ? 6 : 4;
  constexpr int kSmem = std::max(kStages * S::kStageBytes, S::kPartBytes);
  auto kernel = int4_shuffled_wide_kernel<T, MT8, NT, kS, kStages>;
  // Over 48 KB of dynamic shared memory needs an opt-in, once per device (and per instance: the
  // static belongs to this template instance).
  static std::atomic<uint64_t> smem_set_on{0};
  const cudaError_t e = SetFuncAttributeOnce(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem, smem_set_on);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(g.n / S::kRows * kS),
                  static_cast<unsigned>((g.m + S::kTokens - 1) / S::kTokens));
  return LaunchWithPdlCluster(kernel, grid, dim3(kWideThreads), kSmem, kS, stream, pdl.launch, x, b, s, zp, bias, y, g,
                              pdl.weights_early);
}

template <typename T, int MT8, int NT>
cudaError_t LaunchWideNt(int ks, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y,
                         const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  switch (ks) {
    case 8: return LaunchWide<T, MT8, NT, 8>(x, b, s, zp, bias, y, g, pdl, stream);
    case 4: return LaunchWide<T, MT8, NT, 4>(x, b, s, zp, bias, y, g, pdl, stream);
    case 2: return LaunchWide<T, MT8, NT, 2>(x, b, s, zp, bias, y, g, pdl, stream);
    default: return LaunchWide<T, MT8, NT, 1>(x, b, s, zp, bias, y, g, pdl, stream);
  }
}

template <typename T, int MT8>
cudaError_t LaunchWideMt(int nt, int ks, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias,
                         T* y, const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  return nt == 2 ? LaunchWideNt<T, MT8, 2>(ks, x, b, s, zp, bias, y, g, pdl, stream)
                 : LaunchWideNt<T, MT8, 1>(ks, x, b, s, zp, bias, y, g, pdl, stream);
}

}  // namespace

// The split: the smallest kS in {1, 2, 4, 8} whose grid reaches `fill` CTAs per 100 SMs (default
// kInt4ShuffledWideFill = 75: ~3/4 of the SMs; each rank keeps >= 4 chunks); a fuller split adds
// partial tiles to sum but more warps per SM (see kInt4ShuffledWideFill).
template <typename T>
cudaError_t LaunchInt4ShufWide(int variant, int fill, const T* x, const uint8_t* b, const T* s, const uint8_t* zp,
                               const T* bias, T* y, const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  int nt = (g.n % 256 == 0 && variant != 1) ? 2 : 1;
  const int mt8 = g.m <= 8 ? 1 : g.m <= 16 ? 2 : g.m <= 32 ? 4 : 8;
  const int64_t row_blocks = int64_t(g.n / (128 * nt)) * ((g.m + 8 * mt8 - 1) / (8 * mt8));
  int dev = 0;
  const int sms = cudaGetDevice(&dev) == cudaSuccess ? CudaSmCount(dev) : 132;
  const int chunks = g.k / kWideChunkK;
  int ks = 1;
  while (ks < 8 && row_blocks * ks * 100 < int64_t(sms) * std::max(fill, 1) && chunks / (2 * ks) >= 4) ks *= 2;
  switch (mt8) {
    case 1: return LaunchWideMt<T, 1>(nt, ks, x, b, s, zp, bias, y, g, pdl, stream);
    case 2: return LaunchWideMt<T, 2>(nt, ks, x, b, s, zp, bias, y, g, pdl, stream);
    case 4: return LaunchWideMt<T, 4>(nt, ks, x, b, s, zp, bias, y, g, pdl, stream);
    default: return LaunchWideMt<T, 8>(nt, ks, x, b, s, zp, bias, y, g, pdl, stream);
  }
}

template cudaError_t LaunchInt4ShufWide<__half>(int, int, const __half*, const uint8_t*, const __half*, const uint8_t*,
                                                const __half*, __half*, const Int4Geom&, PdlMode, cudaStream_t);
template cudaError_t LaunchInt4ShufWide<__nv_bfloat16>(int, int, const __nv_bfloat16*, const uint8_t*,
                                                       const __nv_bfloat16*, const uint8_t*, const __nv_bfloat16*,
                                                       __nv_bfloat16*, const Int4Geom&, PdlMode, cudaStream_t);

}  // namespace pyquant
