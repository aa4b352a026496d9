// Device helpers shared by the CUDA kernels of both ops (MatMulInt4, LinearFp8): scalar load /
// store in T, the tensor-core MMA wrapper, and the in-register int4 -> fp16/bf16 decode.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/device_info.h"
#include "cuda/pdl.h"
#include "layout/int4_block.h"
#include "ops/matmul_int4.h"

namespace pyquant {
namespace cuda_detail {

template <typename T>
__device__ __forceinline__ float LoadF(const T* p, int64_t i);
template <>
__device__ __forceinline__ float LoadF<float>(const float* p, int64_t i) {
  return p[i];
}
template <>
__device__ __forceinline__ float LoadF<__half>(const __half* p, int64_t i) {
  return __half2float(p[i]);
}
template <>
__device__ __forceinline__ float LoadF<__nv_bfloat16>(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}

template <typename T>
__device__ __forceinline__ T StoreT(float v);
template <>
__device__ __forceinline__ float StoreT<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half StoreT<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 StoreT<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// 16-byte global load that bypasses L1 allocation: weights are streamed exactly once.
__device__ __forceinline__ uint4 LoadStream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
// 16-byte global load through L1 (activations: re-read by every warp / CTA of a column tile).
__device__ __forceinline__ uint4 LoadCached16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }
// Brings the line holding p into L2 (no register, no wait).
__device__ __forceinline__ void PrefetchL2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// ---------------------------------------------------------------------------------------------
// Tensor-core MMA m16n8k16, fp32 accumulators (mma.sync, sm_80+).
//   a[4]: A fragment (16x16, row-major): a[0] = rows g, cols {2t, 2t+1}; a[1] = rows g+8, same
//         cols; a[2] = row g, cols {2t+8, 2t+9}; a[3] = row g+8, cols {2t+8, 2t+9}
//   b0,b1: B fragment (16x8, "col"): b0 = k {2t, 2t+1} of column g; b1 = k {2t+8, 2t+9}
//   c[4]: c[0], c[1] = row g, cols {2t, 2t+1}; c[2], c[3] = row g+8, same cols
// with g = lane / 4 and t = lane % 4; the lower 16 bits of each register hold the lower index.
// ---------------------------------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ void Mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1);
template <>
__device__ __forceinline__ void Mma16816<__half>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                 uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void Mma16816<__nv_bfloat16>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// ---------------------------------------------------------------------------------------------
// int4 -> fp16 / bf16 in registers ("magic number" decode).
//
// OR-ing a 4-bit code q into the low mantissa bits of the 16-bit float kMagic gives exactly
// kBias + q (fp16: 0x6400 = 1024, ulp 1; bf16: 0x4300 = 128, ulp 1). Subtracting kBias + zp is
// exact too, so (q - zp) comes out exact in T, and one multiply by the scale gives the weight,
// rounded once to T (the rounding docs/ops.md allows before the product).
// ---------------------------------------------------------------------------------------------
template <typename T>
struct Int4Magic;
template <>
struct Int4Magic<__half> {
  static constexpr uint32_t kBits = 0x64006400u;
  static constexpr float kBias = 1024.0f;
};
template <>
struct Int4Magic<__nv_bfloat16> {
  static constexpr uint32_t kBits = 0x43004300u;
  static constexpr float kBias = 128.0f;
};

template <typename T>
__device__ __forceinline__ uint32_t Pack2(T lo, T hi) {
  const uint16_t l = *reinterpret_cast<const uint16_t*>(&lo);
  const uint16_t h = *reinterpret_cast<const uint16_t*>(&hi);
  return uint32_t(l) | (uint32_t(h) << 16);
}

template <typename T>
__device__ __forceinline__ uint32_t Sub2(uint32_t a, uint32_t b);
template <>
__device__ __forceinline__ uint32_t Sub2<__half>(uint32_t a, uint32_t b) {
  __half2 r = __hsub2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}
template <>
__device__ __forceinline__ uint32_t Sub2<__nv_bfloat16>(uint32_t a, uint32_t b) {
  __nv_bfloat162 r = __hsub2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}
template <typename T>
__device__ __forceinline__ uint32_t Mul2(uint32_t a, uint32_t b);
template <>
__device__ __forceinline__ uint32_t Mul2<__half>(uint32_t a, uint32_t b) {
  __half2 r = __hmul2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}
template <>
__device__ __forceinline__ uint32_t Mul2<__nv_bfloat16>(uint32_t a, uint32_t b) {
  __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}

// Per (row, block) constants of the decode: zb2 = (kBias + zp) in both halves, s2 = scale in both.
template <typename T>
__device__ __forceinline__ uint32_t ZeroBias2(int zp) {
  const T v = StoreT<T>(Int4Magic<T>::kBias + float(zp));
  return Pack2<T>(v, v);
}

// One 32-bit word of packed codes (bytes = codes {0,1}, {2,3}, {4,5}, {6,7} in the documented
// layout: low nibble = even k) -> four T pairs out[j] = (w[2j], w[2j+1]), w = (q - zp) * s.
// prmt puts byte j of v in byte 0 and byte j of (v >> 4) in byte 2; lop3 keeps the two low
// nibbles and ORs in the magic exponent: 1 shift + 4 x (prmt, lop3, sub, mul) per 8 weights.
// kScale = false: out[j] = (q - zp) pairs, exact (s2 unused).
template <typename T, bool kScale = true>
__device__ __forceinline__ void DequantWord(uint32_t v, uint32_t zb2, uint32_t s2, uint32_t (&out)[4]) {
  const uint32_t v4 = v >> 4;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t p = __byte_perm(v, v4, j | ((4 + j) << 8));
    uint32_t q;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(q) : "r"(p), "n"(0x000F000F), "n"(Int4Magic<T>::kBits));
    out[j] = kScale ? Mul2<T>(Sub2<T>(q, zb2), s2) : Sub2<T>(q, zb2);
  }
}

// (a & mask) | magic in one lop3: the magic-number decode of the nibbles that mask keeps.
__device__ __forceinline__ uint32_t Lop3AndOr(uint32_t a, uint32_t mask, uint32_t magic) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(mask), "r"(magic));
  return r;
}

__device__ __forceinline__ float2 Float2Of(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 Float2Of(__nv_bfloat162 v) { return __bfloat1622float2(v); }

// The CUDA-core GEMVs' dot products of 4 weight pairs w with 4 activation pairs xp (T2 = __half2 /
// __nv_bfloat162), error analysis above GemvMath (matmul_int4_gemv_impl.cu):
// ChainSum: ONE chain per 16-bit lane (mul + 3 fma in T), then fp32;
// ShortChainSum: two-product chains (for scaled weights, the slow path).
template <typename T2>
__device__ __forceinline__ float ChainSum(const T2 (&w)[4], const T2 (&xp)[4]) {
  const T2 c = __hfma2(w[3], xp[3], __hfma2(w[2], xp[2], __hfma2(w[1], xp[1], __hmul2(w[0], xp[0]))));
  const float2 f = Float2Of(c);
  return f.x + f.y;
}
template <typename T2>
__device__ __forceinline__ float ShortChainSum(const T2 (&w)[4], const T2 (&xp)[4]) {
  const float2 a = Float2Of(__hfma2(w[0], xp[0], __hmul2(w[1], xp[1])));
  const float2 b = Float2Of(__hfma2(w[2], xp[2], __hmul2(w[3], xp[3])));
  return (a.x + a.y) + (b.x + b.y);
}

// Zeroes the weights of k >= kv (kv = valid count from this word's first code) in out[4].
__device__ __forceinline__ void MaskPairs(uint32_t (&out)[4], int kv) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (2 * j >= kv)
      out[j] = 0;
    else if (2 * j + 1 >= kv)
      out[j] &= 0xFFFFu;
  }
}

// ---------------------------------------------------------------------------------------------
// MatMulInt4 fast-kernel building blocks (matmul_int4_impl.cu, matmul_int4_gemv_impl.cu).
// ---------------------------------------------------------------------------------------------

// Geometry shared by the fast kernels (all int: K, N < 2^31 by validation, M * K < 2^31 checked
// at dispatch).
struct Int4Geom {
  int m, n, k;
  int bs_log2;    // log2(block_size), block_size >= 32
  int nb;         // n_blocks
  int row_bytes;  // bytes of one B row = nb * block_size / 2 (a multiple of 16)
  int zp_row_bytes;
  int n_chunks;  // ceil(nb * block_size / 128): 128-wide K chunks of the padded row
};

// ceil(log2(v)) for v >= 1, 0 for v <= 1: the block-size shift of both ops' launchers (block sizes
// are powers of two, so it is exact there).
constexpr int CeilLog2(int64_t v) {
  int l = 0;
  while ((int64_t{1} << l) < v) ++l;
  return l;
}
static_assert(CeilLog2(0) == 0 && CeilLog2(1) == 0 && CeilLog2(16) == 4 && CeilLog2(128) == 7 && CeilLog2(129) == 8,
              "CeilLog2");

// The geometry of M tokens through a node with attributes `a` (host; the launchers' one set-up).
inline Int4Geom MakeInt4Geom(int64_t m, const MatMulInt4Attrs& a) {
  Int4Geom g{};
  g.m = static_cast<int>(m);
  g.n = static_cast<int>(a.n);
  g.k = static_cast<int>(a.k);
  g.bs_log2 = CeilLog2(a.block_size);
  g.nb = static_cast<int>(a.n_blocks());
  g.row_bytes = static_cast<int>(Int4RowBytes(a.k, a.block_size));
  g.zp_row_bytes = static_cast<int>(Int4ZeroPointRowBytes(a.k, a.block_size));
  g.n_chunks = static_cast<int>((int64_t(g.nb) * a.block_size + 127) / 128);
  return g;
}

// The weights of one thread for one 128-wide chunk: 16 bytes of B row `col` at k = kb, with the
// block's scale and zero point. Out-of-range rows / chunks load as zero codes with scale 0
// (weights exactly 0, no NaN from garbage).
template <typename T>
struct WeightFrag {
  uint4 q;
  uint32_t zb2, s2;
};

//
// The loads are unconditional (out-of-range fragments read row 0 / block 0 and are then masked):
// a load under a branch cannot be hoisted above the previous fragment's MMAs, and the compiler
// then interleaves load -> decode -> MMA per fragment, leaving 1-2 loads in flight per thread
// instead of U (the cause of the 33-41 % of the HBM floor at M = 1 in the first version).
template <typename T>
__device__ __forceinline__ WeightFrag<T> LoadWeightFrag(const uint8_t* __restrict__ b, const T* __restrict__ scales,
                                                        const uint8_t* __restrict__ zp, const Int4Geom& g, int col,
                                                        int kb) {
  WeightFrag<T> f;
  const bool valid = col < g.n && (kb >> g.bs_log2) < g.nb;
  const int c = valid ? col : 0;
  const int blk = valid ? (kb >> g.bs_log2) : 0;
  const uint4 q = LoadStream16(b + int64_t(c) * g.row_bytes + (valid ? (kb >> 1) : 0));
  const T s = scales[int64_t(c) * g.nb + blk];
  const int z = zp ? Int4ZeroPointAt(zp + int64_t(c) * g.zp_row_bytes, blk) : kInt4SymmetricZeroPoint;
  f.q = valid ? q : make_uint4(0, 0, 0, 0);
  f.s2 = valid ? Pack2<T>(s, s) : 0u;
  f.zb2 = ZeroBias2<T>(valid ? z : 0);
  return f;
}

// Word u (0..3) of a fragment -> B registers of MMA steps 2u, 2u+1: w[0], w[1] (step 2u) and
// w[2], w[3] (step 2u+1). kv = K - (first k of the fragment); weights at k >= K are zeroed so
// that padding codes never reach a result (not even as 0 * Inf).
template <typename T>
__device__ __forceinline__ void DecodeWord(const WeightFrag<T>& f, int u, int kv, uint32_t (&w)[4]) {
  const uint32_t v = u == 0 ? f.q.x : u == 1 ? f.q.y : u == 2 ? f.q.z : f.q.w;
  DequantWord<T>(v, f.zb2, f.s2, w);
  if (kv < 32) MaskPairs(w, kv - 8 * u);
}

// 32 activations X[row][kb .. kb+31] as 4 x uint4 (16 T2 registers); zero for row >= M or k >= K.
// K % 8 == 0 is guaranteed by the dispatch, so 8-element pieces are either fully in or out.
template <typename T>
__device__ __forceinline__ void LoadX32(const T* __restrict__ x, const Int4Geom& g, int row, int kb, uint4 (&xv)[4]) {
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int kk = kb + 8 * u;
    xv[u] = (row < g.m && kk < g.k) ? LoadCached16(x + int64_t(row) * g.k + kk) : make_uint4(0, 0, 0, 0);
  }
}

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Grid of the small-M kernels (int4_smallm_kernel, int4_ring_kernel) for CTAs of nt n8 column
// tiles x mt m16 row tiles: ceil(N / (8 nt)) x ceil(M / (16 mt)).
inline dim3 SmallMGrid(const Int4Geom& g, int nt, int mt) {
  return dim3(static_cast<unsigned>((g.n + 8 * nt - 1) / (8 * nt)),
              static_cast<unsigned>((g.m + 16 * mt - 1) / (16 * mt)));
}

// One 128-wide K chunk of the small-M kernels (int4_smallm_kernel, int4_ring_kernel): acc[i][j]
// += X[m16 tile i] x W[n8 tile j] over the chunk's k = kb .. kb + 31 of this thread (kb = chunk *
// 128 + 32 t, kv = K - kb), with f[j] this thread's weight fragment of column tile j. Each word u
// of the fragments is decoded once for the MT row tiles; each X piece (rows g, g + 8 of a row
// tile, 16 bytes at k = kb + 8 u) is loaded once for the NT column tiles. kHi = false: rows g + 8
// are never valid (M <= 8), not loaded. kUnrollU: unroll of the 4 words (1 keeps MT = 4 from
// hoisting all 32 X loads and spilling).
template <typename T, int MT, int NT, bool kHi, int kUnrollU = 4>
__device__ __forceinline__ void Int4ChunkMma(float (&acc)[MT][NT][4], const T* __restrict__ x, const Int4Geom& g,
                                             int m0, int gr, int kb, const WeightFrag<T> (&f)[NT]) {
  const int kv = g.k - kb;
#pragma unroll kUnrollU
  for (int u = 0; u < 4; ++u) {
    const int kk = kb + 8 * u;
    uint32_t w[NT][4];  // decoded once, used for the MT m16 tiles
#pragma unroll
    for (int j = 0; j < NT; ++j) DecodeWord<T>(f[j], u, kv, w[j]);
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      uint4 a[2];  // rows g and g + 8 of m16 tile i, used for the NT column tiles
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + 16 * i + gr + 8 * h;
        a[h] = ((kHi || h == 0) && row < g.m && kk < g.k) ? LoadCached16(x + int64_t(row) * g.k + kk)
                                                          : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // step s = 2u + h: A regs = T2 #(2h), #(2h+1) of piece u
          Mma16816<T>(acc[i][j], Word(a[0], 2 * h), Word(a[1], 2 * h), Word(a[0], 2 * h + 1), Word(a[1], 2 * h + 1),
                      w[j][2 * h], w[j][2 * h + 1]);
        }
      }
    }
  }
}

// Cluster size for the small-M mma.sync kernels' K split (kS of ReduceMmaTiles): the least of
// 1 / 2 / 4 / 8 that gives every SM a CTA (`ctas` = the grid without the split), while each of the
// cluster's warps keeps at least one of the `chunks` K chunks. 1 off sm_90 and in builds without
// sm_90 code (the cluster sum exists only in sm_90 machine code: JIT-compiled older PTX traps).
inline int ClusterKSplitFor(int64_t ctas, int chunks, int warps) {
#if PYQUANT_WITH_SM90
  int dev = 0;
  if (!CurrentDeviceIsSm90(&dev)) return 1;
  const int sms = CudaSmCount(dev);
  int ks = 1;
  while (ks < 8 && ctas * ks < sms && chunks >= 2 * ks * warps) ks *= 2;
  return ks;
#else
  (void)ctas, (void)chunks, (void)warps;
  return 1;
#endif
}

// The mma.sync small-M kernels' epilogue (both ops): sums the kWarps warps' partial MMA tiles,
// acc(i, j, r) = accumulator r of m16 tile i and n8 column tile j, through red, one column tile
// at a time (fixed order: deterministic), and calls emit(j, e, v) once per value (e = 4 i + r) in
// the CTA that owns it. Contains __syncthreads(): every thread of the CTA calls it.
// kS > 1 (sm_90 only): the CTA is rank `rank` of a cluster of kS CTAs that split the K range of
// one output tile. Each CTA's sums go to its shared `part` [NT][MT * 4][32] instead, and rank 0
// adds the other ranks' in rank order (distributed shared memory: deterministic) and emits.
template <int MT, int NT, int kWarps, int kS, typename Acc, typename Emit>
__device__ __forceinline__ void ReduceMmaTiles(const Acc& acc, float (&red)[kWarps][MT * 4][32], float* part, int rank,
                                               const Emit& emit) {
  static_assert(kS == 1 || kS == 2 || kS == 4 || kS == 8, "K split (cluster size)");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    if (j > 0) __syncthreads();  // the previous tile's readers are done
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r) red[warp][i * 4 + r][lane] = acc(i, j, r);
    __syncthreads();
    // MT * 4 values per lane, spread over the warps.
    for (int e = warp; e < MT * 4; e += kWarps) {
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += red[w][e][lane];
      if constexpr (kS > 1) {
        part[(j * MT * 4 + e) * 32 + lane] = v;
      } else {
        emit(j, e, v);
      }
    }
  }
  if constexpr (kS > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every rank's sums are in its shared memory
    if (rank == 0) {
      for (int je = warp; je < NT * MT * 4; je += kWarps) {  // all warps, also where MT * 4 < kWarps
        const int j = je / (MT * 4), e = je % (MT * 4);
        float v = part[(j * MT * 4 + e) * 32 + lane];
#pragma unroll
        for (int q = 1; q < kS; ++q) v += cluster.map_shared_rank(part, q)[(j * MT * 4 + e) * 32 + lane];
        emit(j, e, v);
      }
    }
    cluster.sync();  // rank 0 is done reading the others' shared memory before they exit
#else
    __trap();  // clusters need sm_90: the dispatch never launches kS > 1 elsewhere
#endif
  }
}

// MatMulInt4's small-M epilogue: ReduceMmaTiles, then Y[m0 + row][col_base + 8 j + col] (+ bias)
// for the rows < M and columns < N.
template <typename T, int MT, int NT, int kWarps, int kS = 1>
__device__ __forceinline__ void Int4ReduceStore(const float (&acc)[MT][NT][4], float (&red)[kWarps][MT * 4][32],
                                                const T* __restrict__ bias, T* __restrict__ y, const Int4Geom& g,
                                                int m0, int col_base, float* part = nullptr, int rank = 0) {
  const int lane = threadIdx.x & 31;
  const int gr = lane >> 2, t = lane & 3;
  ReduceMmaTiles<MT, NT, kWarps, kS>([&](int i, int j, int r) { return acc[i][j][r]; }, red, part, rank,
                                     [&](int j, int e, float v) {
                                       const int i = e >> 2, r = e & 3;
                                       const int row = m0 + 16 * i + gr + (r >= 2 ? 8 : 0);
                                       const int c = col_base + 8 * j + 2 * t + (r & 1);
                                       if (row < g.m && c < g.n) {
                                         y[int64_t(row) * g.n + c] = StoreT<T>(bias ? v + LoadF(bias, c) : v);
                                       }
                                     });
}

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(bytes));
}
// ldmatrix.x4: four 8 x 8 b16 matrices from shared memory; lane l gives the address of row l % 8
// of matrix l / 8 (16 bytes), and receives in r[q] the 4 bytes 4 (l % 4) .. 4 (l % 4) + 3 of row
// l / 4 of matrix q.
__device__ __forceinline__ void Ldmatrix4(uint32_t (&r)[4], const void* smem) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// The prologue of a kStages-deep cp.async pipeline under programmatic dependent launch (pdl.h):
// stages 0 .. kStages - 2 of this CTA's n_my go out, one commit group per stage. The weight copies
// (load_w(p)) are issued before the wait for the previous grid only when they are constant
// (weights_early); X (load_x(p)) always after it. Group p holds X of stage p and group 0 also every
// prologue weight copy, so waiting for group p covers stage p whole.
template <int kStages, typename LoadW, typename LoadX>
__device__ __forceinline__ void PdlPipelinePrologue(int n_my, bool weights_early, const LoadW& load_w,
                                                    const LoadX& load_x) {
  PdlAllowDependents();
  if (!weights_early) PdlWaitPrimary();
#pragma unroll
  for (int p = 0; p < kStages - 1; ++p)
    if (p < n_my) load_w(p);
  if (weights_early) PdlWaitPrimary();
#pragma unroll
  for (int p = 0; p < kStages - 1; ++p) {
    if (p < n_my) load_x(p);
    CpAsyncCommit();
  }
}

// CTA-wide sums of kN per-thread values v[0..kN) (the decode GEMVs' partial dot products):
// warp shuffles, then the kThreads / 32 warp totals through red. Returns total i = threadIdx.x to
// threads threadIdx.x < kN (0 to the others). Contains a __syncthreads(); red must not be
// rewritten before every reader is done (a second barrier if the CTA loops).
template <int kThreads, int kN>
__device__ __forceinline__ float CtaSum(const float* v, float (&red)[kThreads / 32][kN]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    float s = v[i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) red[warp][i] = s;
  }
  __syncthreads();
  float t = 0.0f;
  if (threadIdx.x < kN) {
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) t += red[w][threadIdx.x];
  }
  return t;
}

template <typename T>
__device__ __forceinline__ void StorePair(T* __restrict__ y, const T* __restrict__ bias, const Int4Geom& g, int row,
                                          int col, float v0, float v1) {
  if (row >= g.m) return;
  T* yr = y + int64_t(row) * g.n;
  if (col < g.n) yr[col] = StoreT<T>(bias ? v0 + LoadF(bias, col) : v0);
  if (col + 1 < g.n) yr[col + 1] = StoreT<T>(bias ? v1 + LoadF(bias, col + 1) : v1);
}

}  // namespace cuda_detail

// The CUDA-core decode GEMV of matmul_int4_gemv_impl.cu (M <= 4, K % 32 == 0, block_size >= 32,
// T = __half / __nv_bfloat16, 16-byte aligned X and B); variant = (rows per CTA, threads):
// 0: (4, 128), 1: (2, 128), 2: (8, 128), 3: (4, 256); next-piece loads only where there is one
// (no clamped re-read at the end): 4: (4, 128), 5: (8, 128).
constexpr int kInt4GemvCcVariants = 6;
constexpr int kInt4GemvCcMaxM = 4;
// Default up to M = 4 (GemvVariantFor, matmul_int4_impl.cu: variant 4 at M <= 2 with K <= 8192,
// else variant 0 at M = 1 and variant 2 at M = 2, 3; at M = 4 variant 0 only for K >= 8192): from
// M = 4 on, the per-token FMAs make it issue-bound and the mma.sync small-M kernel is faster on
// short rows (H100, bench/results/2026-11-22-h100-s3-gemv*-bench-cuda.md,
// …-s4-pdl-variants-bench-cuda.md).
// Tried in session 13 and removed again (code: git show ca759fe): a "stream" GEMV for M <= 2 that
// keeps each layer to one small CTA per SM (the next layer's CTA fits beside it under PDL) and
// loads the CTA's rows into a 64 KB shared-memory ring (bulk copies or cp.async) before
// griddepcontrol.wait, so that the next layer's weights stream while this layer computes. Slower
// at M = 1 on every layer (H100, best configuration: 5.5 / 16.3 / 17.6 / 18.2 us against 5.2 /
// 12.6 / 12.7 / 14.9 for this GEMV on 4096^2, 4096 x 14336, 14336 x 4096, 8192^2, K x N;
// bench/results/2026-11-24-h100-s13-stream{1,2,3}-bench-cuda.md). Nsight Compute on 4096^2 alone:
// 12.4 us, 16 warps per SM at ~10 cycles per instruction; once a layer's X arrives, its decode and
// dot products on half an SM take longer than the boundary the prefetch hides.
// Tried in session 27 and removed again (code: git show f2eb272): rolling `prefetch.global.L2` of the
// pieces 2 / 4 strides ahead (one per 128-byte line, capped at 64 registers), for more bytes in
// flight on long rows without registers. H100, M = 1: 14336 x 4096 13.7 us with 4 strides against
// 14.5 for this GEMV, 4096 x 14336 / 8192^2 / 14336 x 1024 / 14336 x 2048 slower (the same for the
// shuffled GEMV and FP8's fused GEMV: even or slower; bench/results/2026-11-26-h100-s27-l2-*-bench-cuda.md).
constexpr int kInt4GemvCcDefaultMaxM = 4;
template <typename T>
void LaunchInt4GemvCc(int variant, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y,
                      const cuda_detail::Int4Geom& g, PdlMode pdl, cudaStream_t stream);

// The ring kernel of matmul_int4_ring_impl.cu (5 <= M <= 64 with mt = ceil(M / 16) in {1, 2, 4}
// m16 tiles per CTA row; the same preconditions as the small-M mma.sync kernel); variant =
// (warps, column tiles NT, ring slots S): 0: (4, 4, 4), 1: (4, 2, 8), 2: (8, 2, 4), 3: (4, 4, 5).
constexpr int kInt4RingVariants = 4;
template <typename T>
void LaunchInt4Ring(int variant, int mt, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias,
                    T* y, const cuda_detail::Int4Geom& g, PdlMode pdl, cudaStream_t stream);

}  // namespace pyquant
