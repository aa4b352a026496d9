// The CUDA-core INT4 decode GEMVs' per-piece arithmetic, shared by matmul_int4_gemv_impl.cu (B
// streamed from global memory into registers) and matmul_int4_gemv_stream_impl.cu (B streamed into
// shared memory by bulk copies). A "piece" is 16 bytes of one B row: 32 codes of one block.
#pragma once

#include "cuda/matmul_int4_impl.cuh"

namespace pyquant {
namespace gemv_detail {

using namespace cuda_detail;

// Weights of one 16-byte piece of one row: 32 codes, their block's scale and zero point.
struct GemvPiece {
  uint4 q;
  uint32_t s2;  // scale in both halves (T2)
  int zp;
};

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
    __device__ __forceinline__ explicit Decoder(const GemvPiece& p)
        : zb2(ZeroBias2<__nv_bfloat16>(p.zp)), s2(p.s2) {}
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
__device__ __forceinline__ float SlowPiece(const typename GemvMath<T>::Decoder& dec, uint4 q, const T* __restrict__ xk) {
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

}  // namespace gemv_detail
}  // namespace pyquant
