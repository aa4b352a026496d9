// LinearFp8 decode GEMV with the activation quantization fused in (M <= 4): one kernel instead of
// quantizer + GEMV.
//
// Why: at M = 1 a layer streams W once in a few microseconds (4096 x 4096: 16.8 MB, ~5.6 us at
// 3 TB/s), and the separate one-CTA-per-row quantizer plus its launch cost a large fraction of
// that (measured 50 % of the floor on 4096 x 4096 vs 73 % on 4096 x 14336,
// bench/results/2026-11-22-h100-notes.md). Here every CTA computes the row amax of X itself (X is
// a few KB, L1/L2-resident: every CTA of an SM reads the same rows) while its first weight loads
// are in flight, then quantizes X on the fly with the same float32 arithmetic as the quantizer
// kernels (docs/ops.md, DynamicFp8RowScale), so the sums are the same as the unfused path's up
// to the fp32 summation order.
//
// Decomposition: grid = ceil(N / kR) CTAs of kThreads threads; CTA i owns W rows
// n0 = i * kR .. n0 + kR - 1 for all kM tokens; thread t owns the 16-byte pieces c = t,
// t + kThreads, ... (16 k each) of those rows. The next piece's weights are loaded before the
// current one is multiplied; partial sums meet through warp shuffles and shared memory.
// Arithmetic: e4m3 -> fp16x2 (cvt, exact) -> float2, products of two e4m3 values are exact in
// fp32 and summed in fp32 (CUDA cores: at 1 byte per weight the FMA rate needs ~25 % of the
// issue slots at the HBM rate). Per-block weight scales (block_size >= 16, a power of two: a
// piece lies in one block) scale each piece's partial sum, per-channel scales the total.
//
// Requirements (checked by the dispatch): T = __half / __nv_bfloat16, K % 16 == 0, X and W
// 16-byte aligned, M <= kFp8GemvMaxM.
#include <algorithm>

#include "cuda/linear_fp8_gemv.h"
#include "cuda/linear_fp8_impl.cuh"

namespace pyquant {

using namespace cuda_detail;
using namespace fp8_detail;

namespace {

// 16 e4m3 bytes -> 16 floats (exact).
__device__ __forceinline__ void Fp8x16ToFloats(const uint4& v, float (&f)[16]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t hh = Fp8x2ToHalf2(h == 0 ? (w[i] & 0xFFFFu) : (w[i] >> 16));
      const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&hh));
      f[4 * i + 2 * h] = p.x, f[4 * i + 2 * h + 1] = p.y;
    }
  }
}

// 16 activations (two 16-byte vectors of T) -> their e4m3 values as floats: x * inv, saturating
// RNE cast (Quant2, as the quantizer kernels), back to float (exact).
template <typename T>
__device__ __forceinline__ void QuantX16(const uint4& a, const uint4& b, float inv, float (&q)[16]) {
  float f[16];
  float fa[8], fb[8];
  ToFloats(a, fa, static_cast<const T*>(nullptr));
  ToFloats(b, fb, static_cast<const T*>(nullptr));
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = fa[i], f[8 + i] = fb[i];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t hh = Fp8x2ToHalf2(Quant2(f[2 * i], f[2 * i + 1], inv));
    const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&hh));
    q[2 * i] = p.x, q[2 * i + 1] = p.y;
  }
}

// 16 activations (two 16-byte vectors of T) -> floats, not quantized (weight_only = 1).
template <typename T>
__device__ __forceinline__ void LoadX16(const uint4& a, const uint4& b, float (&q)[16]) {
  float fa[8], fb[8];
  ToFloats(a, fa, static_cast<const T*>(nullptr));
  ToFloats(b, fb, static_cast<const T*>(nullptr));
#pragma unroll
  for (int i = 0; i < 8; ++i) q[i] = fa[i], q[8 + i] = fb[i];
}

}  // namespace

//   x [M, K] T (M = kM), static_scale / x_scale: the static activation scale (else dynamic per
//   row), w [N, K] e4m3, w_scale [N, nsb] float (nsb = 1 per channel, else ceil(K / 2^bs_log2)),
//   bias [N] T or nullptr, y [M, N] T. grid.x = ceil(N / kR), block = kThreads.
//   weights_early: w / w_scale are constant initializers, so the first pieces may be loaded before
//   the previous grid completes (PDL, cuda/pdl.h).
//   kExact: the next piece is loaded only where there is one (else a clamped index re-reads the
//   last piece: fewer registers, but at K = 4096 every warp ends on an L2 round trip).
//   kWeightOnly (weight_only = 1, linear_fp8_weight_only.h): X is not quantized (no amax pass,
//   row scale 1); products of T and e4m3 values are exact in fp32 as well.
template <typename T, int kM, int kR, int kThreads, bool kBlockScale, bool kExact, bool kWeightOnly = false>
__global__ void __launch_bounds__(kThreads)
    fp8_gemv_fused_kernel(const T* __restrict__ x, int static_scale, float x_scale, const uint8_t* __restrict__ w,
                          const float* __restrict__ w_scale, const T* __restrict__ bias, T* __restrict__ y, int n,
                          int k, int bs_log2, int nsb, bool weights_early) {
  constexpr int kWarps = kThreads / 32;
  const int n0 = blockIdx.x * kR;
  const int pieces = k >> 4;  // K % 16 == 0
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int rows[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) rows[r] = min(n0 + r, n - 1);  // rows past N recompute row N-1, never stored

  // First weights in flight before the amax pass (clamped: unconditional loads) and, with PDL,
  // while the previous grid drains; X is read only after it has completed.
  PdlAllowDependents();
  if (!weights_early) PdlWaitPrimary();
  uint4 cur[kR];
  int c = threadIdx.x;
  if (!kExact || c < pieces) {
#pragma unroll
    for (int r = 0; r < kR; ++r) cur[r] = LoadStream16(w + int64_t(rows[r]) * k + 16 * min(c, pieces - 1));
  }
  if (weights_early) PdlWaitPrimary();

  // Row scales: amax over the whole row (NaN ignored by fmaxf), then the rule of the quantizers.
  __shared__ float red_max[kM][kWarps];
  __shared__ float inv_s[kM], row_s[kM];
  if (kWeightOnly) {
    if (threadIdx.x < kM) inv_s[threadIdx.x] = 1.0f, row_s[threadIdx.x] = 1.0f;
  } else if (static_scale) {
    if (threadIdx.x < kM) inv_s[threadIdx.x] = 1.0f / x_scale, row_s[threadIdx.x] = x_scale;
  } else {
    CtaDynamicRowScales<T, kM, kWarps, true>(x, 0, kM, k, lane, warp, red_max, inv_s, row_s);
  }
  __syncthreads();
  float inv[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) inv[m] = inv_s[m];

  float acc[kM][kR];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[m][r] = 0.0f;

  for (; c < pieces; c += kThreads) {
    uint4 nxt[kR];
    const int cn = kExact ? c + kThreads : min(c + kThreads, pieces - 1);
    if (!kExact || cn < pieces) {
#pragma unroll
      for (int r = 0; r < kR; ++r) nxt[r] = LoadStream16(w + int64_t(rows[r]) * k + 16 * cn);
    }
    float xq[kM][16];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const T* xp = x + int64_t(m) * k + 16 * c;
      if constexpr (kWeightOnly) {
        LoadX16<T>(LoadCached16(xp), LoadCached16(xp + 8), xq[m]);
      } else {
        QuantX16<T>(LoadCached16(xp), LoadCached16(xp + 8), inv[m], xq[m]);
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      float wf[16];
      Fp8x16ToFloats(cur[r], wf);
      const float bscale = kBlockScale ? w_scale[int64_t(rows[r]) * nsb + ((16 * c) >> bs_log2)] : 1.0f;
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) part = fmaf(xq[m][i], wf[i], part);
        acc[m][r] = kBlockScale ? fmaf(part, bscale, acc[m][r]) : acc[m][r] + part;
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) cur[r] = nxt[r];
  }

  __shared__ float red[kWarps][kM * kR];
  float v = CtaSum<kThreads, kM * kR>(&acc[0][0], red);
  if (threadIdx.x < kM * kR) {
    const int m = threadIdx.x / kR, r = threadIdx.x % kR, col = n0 + r;
    if (col < n) {
      // As linear_fp8_ref_kernel: (sum * w_scale) * s_x + bias.
      if (!kBlockScale) v *= w_scale[col];
      v *= row_s[m];
      if (bias) v += LoadF(bias, col);
      y[int64_t(m) * n + col] = StoreT<T>(v);
    }
  }
}

// Chunk kernel (variants 5 and 6, M = 1, per-channel weight scales, not weight_only): thread t's
// pieces c = c0 + t + p * kThreads (p < kP) of the CTA's kR rows are loaded together per chunk of
// kP * kThreads pieces, the first chunk before the PDL wait and the next after the current one is
// multiplied, so a CTA has kR * kP * kThreads * 16 bytes in flight at once instead of trickling
// one piece per row behind the arithmetic (fp8_gemv_fused_kernel's SASS, linear_fp8_gemv.h). The
// register cap (kMinBlocks CTAs per SM) keeps 128 KB of weights in flight per SM in both
// variants. Written for kM tokens, instantiated at kM = 1 only (at M = 2 it lost to variant 2:
// linear_fp8_gemv.h). Where one chunk covers K, X is read once per CTA (each thread loads only the
// pieces it multiplies; the row amax meets across the CTA in one barrier); otherwise an amax pass
// over X comes first, as in fp8_gemv_fused_kernel. Same arithmetic as that kernel (exact products,
// fp32 sums in another order).
//   x [kM, K] T, static_scale / x_scale: the static activation scale (else dynamic), w [N, K] e4m3,
//   w_scale [N] float, bias [N] T or nullptr, y [kM, N] T. grid.x = ceil(N / kR), block = kThreads.
template <typename T, int kM, int kR, int kThreads, int kP, int kMinBlocks = 1>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    fp8_gemv_chunk_kernel(const T* __restrict__ x, int static_scale, float x_scale, const uint8_t* __restrict__ w,
                          const float* __restrict__ w_scale, const T* __restrict__ bias, T* __restrict__ y, int n,
                          int k, bool weights_early) {
  const int n0 = blockIdx.x * kR;
  constexpr int kWarps = kThreads / 32, kStep = kP * kThreads;
  const int pieces = k >> 4;
  const bool one_chunk = pieces <= kStep;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint4 wv[kP][kR], xv[kM][kP][2];
  auto load_w = [&](int c0) {
#pragma unroll
    for (int p = 0; p < kP; ++p) {
      const int c = c0 + threadIdx.x + p * kThreads;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int row = min(n0 + r, n - 1);  // rows past N recompute row N-1, never stored
        wv[p][r] = c < pieces ? LoadStream16(w + int64_t(row) * k + 16 * c) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  auto load_x = [&](int c0) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int p = 0; p < kP; ++p) {
        const int c = c0 + threadIdx.x + p * kThreads;
        const T* xp = x + int64_t(m) * k + 16 * c;
        xv[m][p][0] = c < pieces ? LoadCached16(xp) : make_uint4(0, 0, 0, 0);
        xv[m][p][1] = c < pieces ? LoadCached16(xp + 8) : make_uint4(0, 0, 0, 0);
      }
  };
  PdlAllowDependents();
  if (!weights_early) PdlWaitPrimary();
  load_w(0);
  if (weights_early) PdlWaitPrimary();
  float inv[kM], row_s[kM];
  if (static_scale) {
#pragma unroll
    for (int m = 0; m < kM; ++m) inv[m] = 1.0f / x_scale, row_s[m] = x_scale;
    load_x(0);
  } else {
    __shared__ float red_max[kM][kWarps];
    float amax[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) amax[m] = 0.0f;
    if (!one_chunk) {  // amax over the whole row first
      for (int c = threadIdx.x; c < pieces; c += kThreads)
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          const T* xp = x + int64_t(m) * k + 16 * c;
          amax[m] = VecAbsMax<T>(LoadCached16(xp + 8), VecAbsMax<T>(LoadCached16(xp), amax[m]));
        }
    }
    load_x(0);
    if (one_chunk) {
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int p = 0; p < kP; ++p) amax[m] = VecAbsMax<T>(xv[m][p][1], VecAbsMax<T>(xv[m][p][0], amax[m]));
    }
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const float a = WarpMax(amax[m]);
      if (lane == 0) red_max[m][warp] = a;
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      float v = 0.0f;
#pragma unroll
      for (int i = 0; i < kWarps; ++i) v = fmaxf(v, red_max[m][i]);
      const Fp8RowScale rs = DynamicFp8RowScale(v);
      inv[m] = rs.inv, row_s[m] = rs.s_x;
    }
  }
  float acc[kM][kR];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[m][r] = 0.0f;
  for (int c0 = 0;;) {
#pragma unroll
    for (int p = 0; p < kP; ++p) {
      float xq[kM][16];
#pragma unroll
      for (int m = 0; m < kM; ++m) QuantX16<T>(xv[m][p][0], xv[m][p][1], inv[m], xq[m]);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        float wf[16];
        Fp8x16ToFloats(wv[p][r], wf);
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          float part = 0.0f;
#pragma unroll
          for (int i = 0; i < 16; ++i) part = fmaf(xq[m][i], wf[i], part);
          acc[m][r] += part;
        }
      }
    }
    c0 += kStep;
    if (c0 >= pieces) break;
    load_w(c0);
    load_x(c0);
  }
  __shared__ float red[kWarps][kM * kR];
  float v = CtaSum<kThreads, kM * kR>(&acc[0][0], red);
  if (threadIdx.x < kM * kR) {
    const int m = threadIdx.x / kR, r = threadIdx.x % kR, col = n0 + r;
    if (col < n) {
      v *= w_scale[col];
      v *= row_s[m];
      if (bias) v += LoadF(bias, col);
      y[int64_t(m) * n + col] = StoreT<T>(v);
    }
  }
}

namespace {

template <typename T, int kR, int kThreads, bool kBlock, bool kExact, bool kWeightOnly = false>
void LaunchFused(const LinearFp8Problem& p, int bs_log2, PdlMode pdl, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.n + kR - 1) / kR));
  const T* x = static_cast<const T*>(p.x);
  const T* bias = static_cast<const T*>(p.bias);
  T* y = static_cast<T*>(p.y);
  const int st = p.static_scale ? 1 : 0, n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  const int nsb = static_cast<int>(p.n_scale_blocks);
  auto kernel = fp8_gemv_fused_kernel<T, 4, kR, kThreads, kBlock, kExact, kWeightOnly>;
  if (p.m == 1) kernel = fp8_gemv_fused_kernel<T, 1, kR, kThreads, kBlock, kExact, kWeightOnly>;
  if (p.m == 2) kernel = fp8_gemv_fused_kernel<T, 2, kR, kThreads, kBlock, kExact, kWeightOnly>;
  if (p.m == 3) kernel = fp8_gemv_fused_kernel<T, 3, kR, kThreads, kBlock, kExact, kWeightOnly>;
  // Launch errors are left for the caller's cudaGetLastError().
  (void)LaunchWithPdl(kernel, grid, dim3(kThreads), stream, pdl.launch, x, st, p.x_scale, p.w, p.w_scale, bias, y, n, k,
                      bs_log2, nsb, pdl.weights_early);
}

template <typename T, int kR, int kThreads, bool kExact = false, bool kWeightOnly = false>
void LaunchFusedScales(const LinearFp8Problem& p, int bs_log2, PdlMode pdl, cudaStream_t stream) {
  if (p.block_size != 0) {
    LaunchFused<T, kR, kThreads, true, kExact, kWeightOnly>(p, bs_log2, pdl, stream);
  } else {
    LaunchFused<T, kR, kThreads, false, kExact, kWeightOnly>(p, bs_log2, pdl, stream);
  }
}

// The chunk kernel at M = 1, its register cap kMinBlocks CTAs per SM.
template <typename T, int kR, int kP, int kThreads, int kMinBlocks>
void LaunchChunk(const LinearFp8Problem& p, PdlMode pdl, cudaStream_t stream) {
  (void)LaunchWithPdl(fp8_gemv_chunk_kernel<T, 1, kR, kThreads, kP, kMinBlocks>,
                      dim3(static_cast<unsigned>((p.n + kR - 1) / kR)), dim3(kThreads), stream, pdl.launch,
                      static_cast<const T*>(p.x), p.static_scale ? 1 : 0, p.x_scale, p.w, p.w_scale,
                      static_cast<const T*>(p.bias), static_cast<T*>(p.y), static_cast<int>(p.n), static_cast<int>(p.k),
                      pdl.weights_early);
}

}  // namespace

bool Fp8GemvFusedFits(const LinearFp8Problem& p, size_t elem_bytes) {
  const bool aligned = (reinterpret_cast<uintptr_t>(p.x) & 15) == 0 && (reinterpret_cast<uintptr_t>(p.w) & 15) == 0;
  return elem_bytes == 2 && p.m >= 1 && p.m <= kFp8GemvMaxM && p.k % 16 == 0 && aligned &&
         p.n * p.k < (int64_t{1} << 31) && p.m * p.k < (int64_t{1} << 31);
}

template <typename T>
cudaError_t LaunchFp8GemvFused(const LinearFp8Problem& p, int variant, PdlMode pdl, cudaStream_t stream) {
  const int bs_log2 = CeilLog2(p.block_size);  // 0 for per-channel scales (block_size 0)
  if ((variant == 5 || variant == 6) && Fp8GemvChunkFits(p)) {
    // (rows, pieces per thread and chunk, threads, CTAs per SM by registers)
    if (variant == 5) {
      LaunchChunk<T, 4, 2, 128, 8>(p, pdl, stream);
    } else {
      LaunchChunk<T, 8, 1, 256, 4>(p, pdl, stream);
    }
    return cudaGetLastError();
  }
  switch (variant) {
    case 1: LaunchFusedScales<T, 2, 128>(p, bs_log2, pdl, stream); break;
    case 2: LaunchFusedScales<T, 8, 128>(p, bs_log2, pdl, stream); break;
    case 3: LaunchFusedScales<T, 4, 256>(p, bs_log2, pdl, stream); break;
    case 4: LaunchFusedScales<T, 4, 128, true>(p, bs_log2, pdl, stream); break;
    default: LaunchFusedScales<T, 4, 128>(p, bs_log2, pdl, stream);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchFp8GemvWeightOnly(const LinearFp8Problem& p, PdlMode pdl, cudaStream_t stream) {
  if (!p.weight_only || p.m > kFp8GemvAutoMaxM) return cudaErrorInvalidValue;
  const int bs_log2 = CeilLog2(p.block_size);
  // the auto variants' shapes (Fp8GemvAutoVariant): 4 rows per CTA at M = 1, 8 at M = 2
  if (p.m == 1) {
    LaunchFusedScales<T, 4, 128, false, true>(p, bs_log2, pdl, stream);
  } else {
    LaunchFusedScales<T, 8, 128, false, true>(p, bs_log2, pdl, stream);
  }
  return cudaGetLastError();
}

template cudaError_t LaunchFp8GemvWeightOnly<__half>(const LinearFp8Problem&, PdlMode, cudaStream_t);
template cudaError_t LaunchFp8GemvWeightOnly<__nv_bfloat16>(const LinearFp8Problem&, PdlMode, cudaStream_t);
template cudaError_t LaunchFp8GemvFused<__half>(const LinearFp8Problem&, int, PdlMode, cudaStream_t);
template cudaError_t LaunchFp8GemvFused<__nv_bfloat16>(const LinearFp8Problem&, int, PdlMode, cudaStream_t);

}  // namespace pyquant
