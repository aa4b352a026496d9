// Device building blocks of the kernels on the shuffled weight order (layout/int4_shuffled.h),
// shared by matmul_int4_shuffled_impl.cu (register mma kernel, reference, the rewrite, the
// dispatch), matmul_int4_shuffled_gemv_impl.cu (the CUDA-core GEMV) and
// matmul_int4_shuffled_{wide,piece}_impl.cu (the shared-memory and piece mma kernels), plus their
// launchers.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/matmul_int4_impl.cuh"
#include "cuda/pdl.h"

namespace pyquant {
namespace cuda_detail {

// The packed pair type of T (__half -> __half2, __nv_bfloat16 -> __nv_bfloat162).
template <typename T>
using ShufT2 = std::conditional_t<std::is_same<T, __half>::value, __half2, __nv_bfloat162>;

// ---------------------------------------------------------------------------------------------
// Decode of one shuffled word (layout/int4_shuffled.h) with the per-row constants of its block.
// Out: w[0] = row r0 at k (2w, 2w+1), w[1] = r1 there, w[2] = r0 at (2w+8, 2w+9), w[3] = r1 there:
// exactly the A registers a0..a3 of mma.sync m16n8k16 (matmul_int4_impl.cuh, Mma16816).
//   kScaled = true: (q - zp) * s, rounded once to T (the MMA path, like DequantWord);
//   false: q - zp, exact (the GEMV's fast path, scale applied in fp32 per piece).
// fp16 takes r1 from nibble position 4 (1024 + 16 q, exact; / 16 folded into an fma) to save
// two shifts; bf16 cannot (128 + 16 q leaves its 8-bit significand) and shifts.
// ---------------------------------------------------------------------------------------------
template <typename T>
struct ShufRows {
  uint32_t zb0, zb1, s0, s1;  // zb1: fp16 = -(64 + zp1) pairs, bf16 = kBias + zp1 pairs
};

// The decode constants of one weight row in one block (DecodeShufWord's ShufRows with both of
// its rows = this row) from its raw scale s (T) and zero point z (0..15), in integer arithmetic:
// kBias + z is exact in T (fp16 0x6400 + z = 1024 + z; bf16 0x4300 + z = 128 + z), and so is
// fp16's -(64 + z) = 0xD400 + 16 z (ulp 1/16 at 64).
template <typename T>
__device__ __forceinline__ ShufRows<T> RowDecodeConstants(T s, int z) {
  constexpr uint32_t kBiasBits = std::is_same<T, __half>::value ? 0x6400u : 0x4300u;
  ShufRows<T> r;
  r.zb0 = (kBiasBits + uint32_t(z)) * 0x10001u;
  r.zb1 = std::is_same<T, __half>::value ? (0xD400u + 16u * uint32_t(z)) * 0x10001u : r.zb0;
  r.s0 = r.s1 = Pack2<T>(s, s);
  return r;
}

// The same for the two rows g (s0, z0) and g + 8 (s1, z1) of one shuffled word.
template <typename T>
__device__ __forceinline__ ShufRows<T> RowPairDecodeConstants(T s0, int z0, T s1, int z1) {
  ShufRows<T> r = RowDecodeConstants<T>(s0, z0);
  const ShufRows<T> r1 = RowDecodeConstants<T>(s1, z1);
  r.zb1 = r1.zb1;
  r.s1 = r1.s1;
  return r;
}

// The same from float32 scales (the GEMV's and the wide kernel's): s0 / s1 are values of T.
template <typename T>
__device__ __forceinline__ ShufRows<T> MakeShufRows(float s0, int z0, float s1, int z1) {
  return RowPairDecodeConstants<T>(StoreT<T>(s0), z0, StoreT<T>(s1), z1);
}

template <typename T, bool kScaled>
__device__ __forceinline__ void DecodeShufWord(uint32_t v, const ShufRows<T>& r, uint32_t (&w)[4]) {
  constexpr uint32_t kMagic = Int4Magic<T>::kBits;
  const uint32_t v8 = v >> 8;
  w[0] = Sub2<T>(Lop3AndOr(v, 0x000F000Fu, kMagic), r.zb0);
  w[2] = Sub2<T>(Lop3AndOr(v8, 0x000F000Fu, kMagic), r.zb0);
  if constexpr (std::is_same<T, __half>::value) {
    const __half2 sixteenth = __float2half2_rn(0.0625f);
    const uint32_t b = Lop3AndOr(v, 0x00F000F0u, kMagic), d = Lop3AndOr(v8, 0x00F000F0u, kMagic);
    const __half2 nzb = *reinterpret_cast<const __half2*>(&r.zb1);
    const __half2 w1 = __hfma2(*reinterpret_cast<const __half2*>(&b), sixteenth, nzb);
    const __half2 w3 = __hfma2(*reinterpret_cast<const __half2*>(&d), sixteenth, nzb);
    w[1] = *reinterpret_cast<const uint32_t*>(&w1);
    w[3] = *reinterpret_cast<const uint32_t*>(&w3);
  } else {
    w[1] = Sub2<T>(Lop3AndOr(v >> 4, 0x000F000Fu, kMagic), r.zb1);
    w[3] = Sub2<T>(Lop3AndOr(v >> 12, 0x000F000Fu, kMagic), r.zb1);
  }
  if constexpr (kScaled) {
    w[0] = Mul2<T>(w[0], r.s0);
    w[2] = Mul2<T>(w[2], r.s0);
    w[1] = Mul2<T>(w[1], r.s1);
    w[3] = Mul2<T>(w[3], r.s1);
  }
}

// Zeroes an [NT][MT8][4] block of mma accumulators.
template <int NT, int MT8>
__device__ __forceinline__ void ZeroAcc(float (&acc)[NT][MT8][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < MT8; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[j][i][r] = 0.0f;
}

}  // namespace cuda_detail

// The wide shared-memory mma kernel (matmul_int4_shuffled_wide_impl.cu) for B in the shuffled
// order: a CTA of 8 warps owns 128 * NT weight rows (NT = 2 where N % 256 == 0, else 1) and
// 8 * MT8 tokens (MT8 = 1, 2, 4, 8 by M; grid.y covers M beyond 64); X and the weights stream
// through a cp.async pipeline in shared memory, so every X chunk is read from L2 once per CTA
// and serves all 8 warps (the register kernel's CTAs cover 64 rows each and re-read all of X);
// clusters of kS CTAs split K (kS chosen to fill the SMs) and sum in distributed shared memory in
// rank order (deterministic). Preconditions: LaunchMatMulInt4Shuffled's (T = __half /
// __nv_bfloat16, N % 128 == 0, K % 64 == 0, block_size 64 / 128 / 256), 16-byte aligned X and
// K % 8 == 0 for the 16-byte X copies (K % 64 == 0 implies it), sm_90 (clusters).
// variant: 0 = NT and kS automatic, 1 = NT = 1 (128-row CTAs: twice as many). fill: the K split's
// target in CTAs per 100 SMs (kInt4ShuffledWideFill, matmul_int4.h).
// Returns the launch status.
template <typename T>
cudaError_t LaunchInt4ShufWide(int variant, int fill, const T* x, const uint8_t* b, const T* s, const uint8_t* zp,
                               const T* bias, T* y, const cuda_detail::Int4Geom& g, PdlMode pdl, cudaStream_t stream);

// The piece mma kernel (matmul_int4_shuffled_piece_impl.cu) for B in the shuffled order: each
// lane's 16-byte piece feeds four m16n8k16 MMAs (k permuted alike in A and B), tokens are the
// MMA's columns (8 per token tile; 16 from M = 9, 32 at M = 17-32 on PieceMt4Config), block scales
// applied in fp32 per 64-k unit. config: kInt4ShuffledPieceVariantBase's table (matmul_int4.h),
// < 0 for Int4ShuffledPieceDefaultConfig(N, M, sms); paired: the kernels with the MMAs regrouped so that X
// needs no register moves (Int4ShufKnobs::piece_paired). Needs K % 64 == 0, N % 128 == 0,
// block_size >= 64 and 16-byte aligned X (else cudaErrorInvalidValue). Returns the launch status.
// The CUDA-core GEMV (matmul_int4_shuffled_gemv_impl.cu) for B in the shuffled order, M <=
// kInt4ShuffledGemvMaxM: configuration `config` of kInt4ShuffledGemvVariantBase's table
// (matmul_int4.h; another number runs configuration 0). Needs 16-byte aligned X and the
// preconditions of LaunchMatMulInt4Shuffled. Returns the launch status.
template <typename T>
cudaError_t LaunchInt4ShufGemv(int config, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias,
                               T* y, const cuda_detail::Int4Geom& g, PdlMode pdl, cudaStream_t stream);

template <typename T>
cudaError_t LaunchInt4ShufPiece(int config, bool paired, int sms, const T* x, const uint8_t* b, const T* s,
                                const uint8_t* zp, const T* bias, T* y, const cuda_detail::Int4Geom& g, PdlMode pdl,
                                cudaStream_t stream);

}  // namespace pyquant
