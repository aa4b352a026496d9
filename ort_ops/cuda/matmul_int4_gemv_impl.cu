// MatMulInt4 decode GEMV (M <= 8) with the operands of the MMA swapped: the weights are the
// m16 "A" operand (16 rows of N per MMA) and X^T the n8 "B" operand (the M <= 8 tokens), so one
// mma.m16n8k16 consumes 256 weights instead of 128 in int4_smallm_kernel, where the tokens fill
// the m16 slot (15 of 16 rows padding at M = 1). Same weight fragments and k order as there
// (matmul_int4_impl.cu's header comment): thread (g = lane / 4, t = lane % 4) loads 16 bytes of
// B row n0 + g and 16 bytes of row n0 + g + 8 per 128-wide K chunk; in MMA step s its A slots
// {2t, 2t+1} hold k = kb + 4s + {0, 1} and {2t+8, 2t+9} hold kb + 4s + {2, 3}, and its B slots
// (token g) the same k of X, i.e. X[g][kb + 4s .. kb + 4s + 3]: one 16-byte load of X row g per
// two steps. Accumulator c0, c1 = (row n0 + g, tokens 2t, 2t + 1), c2, c3 = (row n0 + g + 8, same).
//
// grid = ceil(N / 16) CTAs of kWarps warps; the warps split the K chunks (groups of U chunks,
// interleaved), the next group's weights are loaded before the current group's MMAs, and the
// partial tiles meet in shared memory.
#include "cuda/matmul_int4.h"
#include "cuda/matmul_int4_impl.cuh"

namespace pyquant {

using namespace cuda_detail;

//   x [M, K] T (M <= 8), b [N, row_bytes] codes, scales [N, nb] T, zp [N, zp_row_bytes] or nullptr,
//   bias [N] T or nullptr, y [M, N] T.
template <typename T, int kWarps, int U>
__global__ void __launch_bounds__(32 * kWarps)
    int4_gemv_swap_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b, const T* __restrict__ scales,
                          const uint8_t* __restrict__ zp, const T* __restrict__ bias, T* __restrict__ y, Int4Geom g) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gr = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * 16;
  const int row_a = n0 + gr, row_b = n0 + gr + 8;  // this thread's two B rows (outputs)
  const bool x_valid = gr < g.m;                    // this thread's token (B column)
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};

  const int iters = (g.n_chunks + U * kWarps - 1) / (U * kWarps);
  auto load_group = [&](int it, WeightFrag<T>(&fa)[U], WeightFrag<T>(&fb)[U]) {
    const int c0 = it * U * kWarps + warp;
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
      const int c = c0 + uu * kWarps;
      const int kb = c * 128 + 32 * t;
      fa[uu] = LoadWeightFrag<T>(b, scales, zp, g, c < g.n_chunks ? row_a : g.n, kb);
      fb[uu] = LoadWeightFrag<T>(b, scales, zp, g, c < g.n_chunks ? row_b : g.n, kb);
    }
  };
  auto compute_group = [&](int it, const WeightFrag<T>(&fa)[U], const WeightFrag<T>(&fb)[U]) {
    const int c0 = it * U * kWarps + warp;
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
      const int c = c0 + uu * kWarps;
      if (c >= g.n_chunks) break;  // warp-uniform
      const int kb = c * 128 + 32 * t;
      const int kv = g.k - kb;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int kk = kb + 8 * u;
        const uint4 xv = (x_valid && kk < g.k) ? LoadCached16(x + int64_t(gr) * g.k + kk) : make_uint4(0, 0, 0, 0);
        uint32_t wa[4], wb[4];
        DecodeWord<T>(fa[uu], u, kv, wa);
        DecodeWord<T>(fb[uu], u, kv, wb);
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // step s = 2u + h
          Mma16816<T>(acc, wa[2 * h], wb[2 * h], wa[2 * h + 1], wb[2 * h + 1], Word(xv, 2 * h), Word(xv, 2 * h + 1));
        }
      }
    }
  };

  WeightFrag<T> fa[U], fb[U];
  load_group(0, fa, fb);
  for (int it = 0; it < iters; ++it) {
    WeightFrag<T> na[U], nb[U];
    if (it + 1 < iters) load_group(it + 1, na, nb);  // in flight during this group's MMAs
    compute_group(it, fa, fb);
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
      fa[uu] = na[uu];
      fb[uu] = nb[uu];
    }
  }

  // Sum the warps' partial tiles; element e of lane: row n0 + gr + 8 * (e >> 1), token 2t + (e & 1).
  __shared__ float red[kWarps][4][32];
#pragma unroll
  for (int e = 0; e < 4; ++e) red[warp][e][lane] = acc[e];
  __syncthreads();
  for (int e = warp; e < 4; e += kWarps) {
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += red[w][e][lane];
    const int n = n0 + gr + 8 * (e >> 1), m = 2 * t + (e & 1);
    if (m < g.m && n < g.n) y[int64_t(m) * g.n + n] = StoreT<T>(bias ? v + LoadF(bias, n) : v);
  }
}

template <typename T>
void LaunchInt4GemvSwap(int variant, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias,
                        T* y, const Int4Geom& g, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((g.n + 15) / 16));
  switch (variant) {
    case 1:
      int4_gemv_swap_kernel<T, 2, 4><<<grid, 64, 0, stream>>>(x, b, s, zp, bias, y, g);
      break;
    case 2:
      int4_gemv_swap_kernel<T, 8, 2><<<grid, 256, 0, stream>>>(x, b, s, zp, bias, y, g);
      break;
    default:
      int4_gemv_swap_kernel<T, 4, 4><<<grid, 128, 0, stream>>>(x, b, s, zp, bias, y, g);
  }
}

template void LaunchInt4GemvSwap<__half>(int, const __half*, const uint8_t*, const __half*, const uint8_t*,
                                         const __half*, __half*, const Int4Geom&, cudaStream_t);
template void LaunchInt4GemvSwap<__nv_bfloat16>(int, const __nv_bfloat16*, const uint8_t*, const __nv_bfloat16*,
                                                const uint8_t*, const __nv_bfloat16*, __nv_bfloat16*, const Int4Geom&,
                                                cudaStream_t);

}  // namespace pyquant
