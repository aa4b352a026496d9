// MatMulInt4 decode GEMV on CUDA cores (M <= 4): the M = 1..4 path of the CUDA EP.
//
// Why CUDA cores: at M = 1 the mma.sync small-M kernel (int4_smallm_kernel) fills one of the 16
// rows of every m16n8k16 MMA and shuffles X and the weights into fragment order; measured it
// streams the weights at 31-41 % of the HBM floor on an H100 however many loads it keeps in
// flight (bench/results/2026-11-22-h100-notes.md). Here a thread owns whole 16-byte pieces of B
// rows (32 codes of one block), decodes them with the magic-number trick and multiplies with
// packed half2 / bfloat162 FMAs: no fragment shuffles, no idle MMA rows, and each 16-byte
// activation piece (L1-resident: every CTA of an SM reads the same X) serves kR weight rows.
//
// Decomposition: grid = ceil(N / kR) CTAs of kThreads threads. CTA i owns B rows (= Y columns)
// n0 = i * kR .. n0 + kR - 1 for all kM tokens; thread t owns the 32-code pieces c = t,
// t + kThreads, ... of those rows (piece c = k in [32c, 32c + 32), inside one block since
// block_size >= 32). The next piece's weights are loaded before the current one is multiplied.
// Partial sums meet through warp shuffles and then shared memory.
//
// Numerics: the codes decode exactly to q - zp in T; a piece's 32 products are summed in T in
// chains of 4 per 16-bit lane, then in fp32, and the piece sum is multiplied by the block scale in
// fp32 (4 fewer T multiplies per 8 weights than scaling every weight: the kernel is issue-bound).
// Pieces whose fast sum is not finite (or whose scale is not) are recomputed with scaled weights.
// Error bounds: the note above GemvMath.
//
// Requirements (checked by the dispatch, matmul_int4_impl.cu): T = __half / __nv_bfloat16,
// block_size >= 32, K % 32 == 0 (every piece is whole: padding codes are never read), X and B
// 16-byte aligned, M <= 4.
#include "cuda/matmul_int4.h"
#include "cuda/matmul_int4_impl.cuh"
#include "cuda/pdl.h"

namespace pyquant {

using namespace cuda_detail;

namespace {

// Weights of one 16-byte piece of one row: 32 codes, their block's scale and zero point.
struct GemvPiece {
  uint4 q;
  uint32_t s2;  // scale in both halves (T2)
  int zp;
};

template <typename T>
__device__ __forceinline__ GemvPiece LoadGemvPiece(const uint8_t* __restrict__ b, const T* __restrict__ scales,
                                                   const uint8_t* __restrict__ zp, const Int4Geom& g, int row,
                                                   int piece) {
  GemvPiece p;
  const int blk = (piece * 32) >> g.bs_log2;
  p.q = LoadStream16(b + int64_t(row) * g.row_bytes + piece * 16);
  const T s = scales[int64_t(row) * g.nb + blk];
  p.s2 = Pack2<T>(s, s);
  p.zp = zp ? Int4ZeroPointAt(zp + int64_t(row) * g.zp_row_bytes, blk) : kInt4SymmetricZeroPoint;
  return p;
}

// Per-T arithmetic of the GEMV.
//   Decoder(piece).Word<kScaled>(v, w): one 32-bit word of codes (8 weights) -> 4 T pairs w[j]:
//     q - zp (exact in T) or, kScaled, (q - zp) * s (rounded once to T);
//   XPairs(xv, xp): the 8 activations of the same k, paired the same way;
// ChainSum(w, xp): fp32 sum of 8 products as ONE chain per 16-bit lane (mul + 3 fma in T);
// ShortChainSum(w, xp): the same with two-product chains (for scaled weights).
//
// Error (docs/ops.md: |err| <= atol(T) * sum |x w| + ulp(y); atol = 2e-3 fp16, 1.6e-2 bf16; u =
// 2^-11 fp16, 2^-8 bf16). Fast path: the weights are exact, a lane's chain of 4 products rounds
// at most 4 times, each time relative to a partial sum <= sum |x w| of its products: <= 4u =
// 1.95e-3 (fp16), 1.56e-2 (bf16); then fp32 (sum, times the scale). Slow path (a piece whose
// fast sum is not finite -- |x| above ~1000 can overflow the unscaled fp16 chain -- or whose
// scale is not finite): weights scaled first, two-product chains: 3u, and every T intermediate
// is at the magnitude of the true partial sums, with IEEE inf / NaN semantics per weight.
template <typename T>
struct GemvMath;

// fp16: codes are paired as (k_j, k_{j+4}) so that the weights need no byte permute:
//   word v = codes k0..k7 (nibble i = k_i). lop3(v, 0x000F000F) -> (k0, k4) as 1024 + q;
//   lop3(v, 0x00F000F0) -> (k1, k5) as 1024 + 16 q; the same on v >> 8 -> (k2, k6), (k3, k7).
//   (1024 + q) - (1024 + zp) and (1024 + 16 q) / 16 - (64 + zp) are exact: 1 shift + 4 lop3 +
//   4 sub/fma per 8 weights. X is permuted into the same pairs once per piece and reused by all
//   kR rows (4 prmt per 8 activations).
template <>
struct GemvMath<__half> {
  using T2 = __half2;
  struct Decoder {
    __half2 zb, nzb16, s;
    Decoder() = default;
    __device__ __forceinline__ explicit Decoder(const GemvPiece& p) {
      zb = __float2half2_rn(1024.0f + float(p.zp));
      nzb16 = __float2half2_rn(-64.0f - float(p.zp));
      s = *reinterpret_cast<const __half2*>(&p.s2);
    }
    template <bool kScaled>
    __device__ __forceinline__ void Word(uint32_t v, __half2 (&w)[4]) const {
      const uint32_t v8 = v >> 8;
      const uint32_t a = Lop3AndOr(v, 0x000F000Fu, 0x64006400u), b = Lop3AndOr(v, 0x00F000F0u, 0x64006400u);
      const uint32_t c = Lop3AndOr(v8, 0x000F000Fu, 0x64006400u), d = Lop3AndOr(v8, 0x00F000F0u, 0x64006400u);
      const __half2 sixteenth = __float2half2_rn(0.0625f);
      w[0] = __hsub2(*reinterpret_cast<const __half2*>(&a), zb);
      w[1] = __hfma2(*reinterpret_cast<const __half2*>(&b), sixteenth, nzb16);
      w[2] = __hsub2(*reinterpret_cast<const __half2*>(&c), zb);
      w[3] = __hfma2(*reinterpret_cast<const __half2*>(&d), sixteenth, nzb16);
      if constexpr (kScaled) {
#pragma unroll
        for (int j = 0; j < 4; ++j) w[j] = __hmul2(w[j], s);
      }
    }
  };
  __device__ __forceinline__ static void XPairs(const uint4& xv, __half2 (&xp)[4]) {
    const uint32_t p0 = __byte_perm(xv.x, xv.z, 0x5410), p1 = __byte_perm(xv.x, xv.z, 0x7632);
    const uint32_t p2 = __byte_perm(xv.y, xv.w, 0x5410), p3 = __byte_perm(xv.y, xv.w, 0x7632);
    xp[0] = *reinterpret_cast<const __half2*>(&p0);  // (x0, x4)
    xp[1] = *reinterpret_cast<const __half2*>(&p1);  // (x1, x5)
    xp[2] = *reinterpret_cast<const __half2*>(&p2);  // (x2, x6)
    xp[3] = *reinterpret_cast<const __half2*>(&p3);  // (x3, x7)
  }
};

// bf16: 128 + 16 q does not fit bf16's 7-bit mantissa, so natural pairs (k_2j, k_2j+1) as in
// DequantWord (prmt + lop3 + sub per pair) and X as loaded.
template <>
struct GemvMath<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  struct Decoder {
    uint32_t zb2, s2;
    Decoder() = default;
    __device__ __forceinline__ explicit Decoder(const GemvPiece& p) : zb2(ZeroBias2<__nv_bfloat16>(p.zp)), s2(p.s2) {}
    template <bool kScaled>
    __device__ __forceinline__ void Word(uint32_t v, __nv_bfloat162 (&w)[4]) const {
      uint32_t o[4];
      DequantWord<__nv_bfloat16, kScaled>(v, zb2, s2, o);
#pragma unroll
      for (int j = 0; j < 4; ++j) w[j] = *reinterpret_cast<const __nv_bfloat162*>(&o[j]);
    }
  };
  __device__ __forceinline__ static void XPairs(const uint4& xv, __nv_bfloat162 (&xp)[4]) {
    xp[0] = *reinterpret_cast<const __nv_bfloat162*>(&xv.x);
    xp[1] = *reinterpret_cast<const __nv_bfloat162*>(&xv.y);
    xp[2] = *reinterpret_cast<const __nv_bfloat162*>(&xv.z);
    xp[3] = *reinterpret_cast<const __nv_bfloat162*>(&xv.w);
  }
};

// The slow path of one piece of one row and token: scaled weights, two-product chains, X reloaded.
template <typename T>
__device__ __forceinline__ float SlowPiece(const typename GemvMath<T>::Decoder& dec, uint4 q,
                                           const T* __restrict__ xk) {
  using T2 = typename GemvMath<T>::T2;
  float sum = 0.0f;
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    T2 w[4], xp[4];
    dec.template Word<true>(Word(q, u), w);
    GemvMath<T>::XPairs(LoadCached16(xk + 8 * u), xp);
    sum += ShortChainSum(w, xp);
  }
  return sum;
}

}  // namespace

//   x [M, K] T (M = kM), b [N, row_bytes] codes, scales [N, nb] T, zp [N, zp_row_bytes] or
//   nullptr, bias [N] T or nullptr, y [M, N] T. grid.x = ceil(N / kR), block = kThreads.
//   weights_early: b / scales / zp are constant initializers, so the first pieces may be loaded
//   before the previous grid completes (PDL, cuda/pdl.h).
template <typename T, int kM, int kR, int kThreads, bool kExactPrefetch>
__global__ void __launch_bounds__(kThreads)
    int4_gemv_cc_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b, const T* __restrict__ scales,
                        const uint8_t* __restrict__ zp, const T* __restrict__ bias, T* __restrict__ y, Int4Geom g,
                        bool weights_early) {
  using Math = GemvMath<T>;
  using T2 = typename Math::T2;
  const int n0 = blockIdx.x * kR;
  const int pieces = g.k >> 5;  // K % 32 == 0
  int rows[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) rows[r] = min(n0 + r, g.n - 1);  // rows past N recompute row N-1, never stored

  float acc[kM][kR];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[m][r] = 0.0f;

  // The next piece's kR loads are issued before this piece's arithmetic. kExactPrefetch = false:
  // unconditional loads (a clamped index past the end re-reads the last piece; fewer registers);
  // true: only where there is a next piece (at K = 4096 every thread has one piece per row, and
  // the clamped re-read costs every warp an L2 round trip before it can exit).
  // PDL: the next GEMV may be scheduled as soon as every CTA of this one has started; the first
  // pieces (at K <= 4096 all of this thread's weights) are in flight while the previous grid drains.
  PdlAllowDependents();
  if (!weights_early) PdlWaitPrimary();
  GemvPiece cur[kR];
  bool slow = false;  // a piece needs the slow path (see the error note above GemvMath)
  int c = threadIdx.x;
  if (!kExactPrefetch || c < pieces) {
#pragma unroll
    for (int r = 0; r < kR; ++r) cur[r] = LoadGemvPiece<T>(b, scales, zp, g, rows[r], min(c, pieces - 1));
  }
  if (weights_early) PdlWaitPrimary();  // X and Y only after the previous grid is complete
  for (; c < pieces; c += kThreads) {
    GemvPiece nxt[kR];
    const int cn = kExactPrefetch ? c + kThreads : min(c + kThreads, pieces - 1);
    if (!kExactPrefetch || cn < pieces) {
#pragma unroll
      for (int r = 0; r < kR; ++r) nxt[r] = LoadGemvPiece<T>(b, scales, zp, g, rows[r], cn);
    }

    typename Math::Decoder dec[kR];
    float part[kM][kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      dec[r] = typename Math::Decoder(cur[r]);
#pragma unroll
      for (int m = 0; m < kM; ++m) part[m][r] = 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {  // code word u of the piece: k = 32c + 8u .. + 7
      T2 xp[kM][4];
#pragma unroll
      for (int m = 0; m < kM; ++m) Math::XPairs(LoadCached16(x + int64_t(m) * g.k + 32 * c + 8 * u), xp[m]);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        T2 w[4];
        dec[r].template Word<false>(Word(cur[r].q, u), w);
#pragma unroll
        for (int m = 0; m < kM; ++m) part[m][r] += ChainSum(w, xp[m]);
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const float s = Float2Of(*reinterpret_cast<const T2*>(&cur[r].s2)).x;
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        slow |= !(isfinite(part[m][r]) && isfinite(s));
        acc[m][r] = fmaf(part[m][r], s, acc[m][r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) cur[r] = nxt[r];
  }

  if (slow) {  // rare: this thread's sums again, every piece on the slow path
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int r = 0; r < kR; ++r) acc[m][r] = 0.0f;
    for (int cc = threadIdx.x; cc < pieces; cc += kThreads) {
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const GemvPiece pc = LoadGemvPiece<T>(b, scales, zp, g, rows[r], cc);
        const typename Math::Decoder dec(pc);
#pragma unroll
        for (int m = 0; m < kM; ++m) acc[m][r] += SlowPiece<T>(dec, pc.q, x + int64_t(m) * g.k + 32 * cc);
      }
    }
  }

  __shared__ float red[kThreads / 32][kM * kR];
  const float v = CtaSum<kThreads, kM * kR>(&acc[0][0], red);
  if (threadIdx.x < kM * kR) {
    const int m = threadIdx.x / kR, n = n0 + threadIdx.x % kR;
    if (n < g.n) y[int64_t(m) * g.n + n] = StoreT<T>(bias ? v + LoadF(bias, n) : v);
  }
}

namespace {

template <typename T, int kR, int kThreads, bool kExact = false>
void LaunchCc(const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y, const Int4Geom& g,
              PdlMode pdl, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((g.n + kR - 1) / kR));
  auto kernel = int4_gemv_cc_kernel<T, 4, kR, kThreads, kExact>;
  if (g.m == 1) kernel = int4_gemv_cc_kernel<T, 1, kR, kThreads, kExact>;
  if (g.m == 2) kernel = int4_gemv_cc_kernel<T, 2, kR, kThreads, kExact>;
  if (g.m == 3) kernel = int4_gemv_cc_kernel<T, 3, kR, kThreads, kExact>;
  // Launch errors are left for the caller's cudaGetLastError().
  (void)LaunchWithPdl(kernel, grid, dim3(kThreads), stream, pdl.launch, x, b, s, zp, bias, y, g, pdl.weights_early);
}

}  // namespace

template <typename T>
void LaunchInt4GemvCc(int variant, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y,
                      const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  switch (variant) {
    case 1: LaunchCc<T, 2, 128>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 2: LaunchCc<T, 8, 128>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 3: LaunchCc<T, 4, 256>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 4: LaunchCc<T, 4, 128, true>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 5: LaunchCc<T, 8, 128, true>(x, b, s, zp, bias, y, g, pdl, stream); break;
    default: LaunchCc<T, 4, 128>(x, b, s, zp, bias, y, g, pdl, stream);
  }
}

template void LaunchInt4GemvCc<__half>(int, const __half*, const uint8_t*, const __half*, const uint8_t*, const __half*,
                                       __half*, const Int4Geom&, PdlMode, cudaStream_t);
template void LaunchInt4GemvCc<__nv_bfloat16>(int, const __nv_bfloat16*, const uint8_t*, const __nv_bfloat16*,
                                              const uint8_t*, const __nv_bfloat16*, __nv_bfloat16*, const Int4Geom&,
                                              PdlMode, cudaStream_t);

}  // namespace pyquant
