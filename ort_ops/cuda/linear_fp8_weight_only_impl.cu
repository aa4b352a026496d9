// LinearFp8 with weight_only = 1 ("weight-only FP8", W8A16) on CUDA: Y = X (W * s_w)^T + bias with X
// in T, not quantized (docs/ops.md, "Weight-only").
//
// Why its own kernels: every W8A8 kernel of linear_fp8_impl.cu reads the quantizer's e4m3 xq (1
// byte per activation) and its row scales; here X is read as it is (2 bytes per activation) and no
// workspace is needed. The same byte count of W (1 per weight) is streamed.
//
//   M <= kFp8GemvAutoMaxM: the fused decode GEMV with its quantization left out
//     (LaunchFp8GemvWeightOnly, linear_fp8_gemv_impl.cu: CUDA cores, products exact in fp32).
//   larger M: fp8_wo_mma_kernel below, tensor cores (mma.sync m16n8k16 on T operands): e4m3 -> T
//     is exact for fp16 and bf16 (3 mantissa bits, exponents 2^-9 .. 2^8), and T x T products are
//     exact in the fp32 accumulators, so the sums are those of the float32 formula up to
//     summation order. The fragment trick of fp8_mma_kernel (linear_fp8_impl.cu): thread t =
//     lane % 4 loads 16 consecutive k (kb = chunk * 64 + 16 t) of its W rows (16 bytes) and of its
//     X rows (32 bytes, two 16-byte loads); MMA step s (0..3) puts k = kb + 4s + {0, 1} into
//     slots {2t, 2t+1} and kb + 4s + {2, 3} into {2t+8, 2t+9}: A (X, row-major m16 x k16) takes
//     words 2s / 2s + 1 of the 8 T2 words of its rows' pieces, B (W, n8) the two e4m3 pairs of
//     word s of its W piece.
//   sm_90 from M = 17 (Fp8Options::sm90_min_m) with per-channel scales: the CUTLASS mixed-input
//     GEMM of sm90/fp8_wo_gemm_sm90.cu (e4m3 converted in registers, wgmma on T), except on short
//     rows where the mma kernel's grid stays small (WoGemmArgs).
//   elsewhere (float32 X, K % 16 != 0, block_size 16 / 32, unaligned pointers) and for
//     PYQUANT_CUDA_KERNELS=ref: fp8_wo_ref_kernel, one thread per output.
// fp8_wo_mma_kernel suits decode-sized M: above M = 16 every CTA of 32 channels re-reads its token
// rows of X from L2, which is why prefill takes the Hopper GEMM where there is one.
#include "cuda/linear_fp8_weight_only.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/device_info.h"
#include "cuda/linear_fp8_gemv.h"
#include "cuda/linear_fp8_impl.cuh"
#include "cuda/matmul_int4_impl.cuh"
#if PYQUANT_WITH_SM90
#include "cuda/sm90/fp8_wo_gemm_sm90.h"
#endif

namespace pyquant {

using namespace cuda_detail;
using namespace fp8_detail;

namespace {

// x [M, K] T, w [N, K] e4m3, w_scale [N, nsb] float (nsb = 1 per channel, else ceil(K / bs)),
// bias [N] T or nullptr, y [M, N] T. grid = (ceil(N / 128), M), block = 128. The ground truth:
// products and sums in float32, per block then scaled, as linear_fp8_ref_kernel with xq = x.
template <typename T>
__global__ void fp8_wo_ref_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w,
                                  const float* __restrict__ w_scale, const T* __restrict__ bias, T* __restrict__ y,
                                  int64_t m, int64_t n, int64_t k, int64_t block_size, int64_t n_scale_blocks) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t row = blockIdx.y;
  if (col >= n || row >= m) return;
  const T* xr = x + row * k;
  const uint8_t* wr = w + col * k;
  const float* ws = w_scale + col * n_scale_blocks;
  float acc = 0.0f;
  const int64_t bs = block_size ? block_size : k;
  for (int64_t k0 = 0, blk = 0; k0 < k; k0 += bs, ++blk) {
    float part = 0.0f;
    const int64_t k1 = min(k, k0 + bs);
    for (int64_t kk = k0; kk < k1; ++kk) part += LoadF(xr, kk) * Fp8ToFloat(wr[kk]);
    acc += part * ws[blk];
  }
  if (bias) acc += LoadF(bias, col);
  y[row * n + col] = StoreT<T>(acc);
}

struct WoGeom {
  int m, n, k;
  int n_chunks;  // ceil(K / 64)
  int bs_log2;   // log2(block_size) with per-block scales, else unused
  int n_scale_blocks;
};

// Two e4m3 bytes (low = lower k) -> a T2 word, exact.
template <typename T>
__device__ __forceinline__ uint32_t Fp8x2ToT2(uint32_t v16);
template <>
__device__ __forceinline__ uint32_t Fp8x2ToT2<__half>(uint32_t v16) {
  return Fp8x2ToHalf2(v16);
}
template <>
__device__ __forceinline__ uint32_t Fp8x2ToT2<__nv_bfloat16>(uint32_t v16) {
  const uint32_t h = Fp8x2ToHalf2(v16);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  const __nv_bfloat162 b = __float22bfloat162_rn(f);  // exact: e4m3 values are bf16 values
  return *reinterpret_cast<const uint32_t*>(&b);
}

// grid = (ceil(N / (8 NT)), ceil(M / (16 MT))), block = 32 kWarps.
//   x [M, K] T, w [N, K] e4m3, w_scale [N, n_scale_blocks] float, bias [N] T or nullptr, y [M, N] T.
//   Warp `warp` takes the 64-wide K chunks warp, warp + kWarps, ... in groups of U (U W pieces and
//   U X pieces per row half in flight per thread, double-buffered across groups); the kWarps
//   partial tiles meet in shared memory (ReduceMmaTiles, fixed order).
//   NT: 8-channel tiles per warp (X pieces loaded once for all of them); MT: m16 token tiles.
//   kLow8 (M <= 8, MT == 1): rows g + 8 of the m16 tile are padding: not loaded.
//   kBlockScale: w_scale per 2^bs_log2-wide K block (>= 64): each chunk's fp32 partial sums are
//   scaled and added; else one per channel, applied to the total.
//   weights_early: W is a constant initializer, so its first lines may be prefetched into L2
//   before the previous kernel has finished (PDL, cuda/pdl.h).
template <typename T, int MT, int NT, int U, int kWarps, bool kBlockScale, bool kLow8>
__global__ void __launch_bounds__(32 * kWarps)
    fp8_wo_mma_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w, const float* __restrict__ w_scale,
                      const T* __restrict__ bias, T* __restrict__ y, WoGeom g, bool weights_early) {
  static_assert(!kLow8 || MT == 1, "kLow8 is the M <= 8 variant of MT == 1");
  constexpr int kH = kLow8 ? 1 : 2;  // token row halves loaded (g, g + 8)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gr = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * 8 * NT;
  const int col = n0 + gr;  // this thread's W row of column tile 0 (tile j: col + 8 j)
  const int m0 = blockIdx.y * 16 * MT;
  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

  // One group's loads: unconditional, from clamped addresses, masked after (rows past M / N only
  // feed outputs that are never stored; chunks past K must add exact zeros). K % 16 == 0, so a
  // thread's 16 k are all inside K or all outside.
  auto load_group = [&](int c0, uint4(&wv)[U][NT], uint4(&xv)[U][MT][kH][2]) {
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
      const int chunk = c0 + uu * kWarps;
      const int kb = chunk * 64 + 16 * t;
      const bool kin = chunk < g.n_chunks && kb < g.k;
      const int kbc = kin ? kb : 0;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint4 wl = LoadStream16(w + int64_t(min(col + 8 * j, g.n - 1)) * g.k + kbc);
        wv[uu][j] = kin ? wl : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < kH; ++h) {
          const T* xp = x + int64_t(min(m0 + 16 * i + gr + 8 * h, g.m - 1)) * g.k + kbc;
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const uint4 xl = LoadCached16(xp + 8 * q);
            xv[uu][i][h][q] = kin ? xl : make_uint4(0, 0, 0, 0);
          }
        }
    }
  };
  auto compute_group = [&](int c0, const uint4(&wv)[U][NT], const uint4(&xv)[U][MT][kH][2]) {
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
      float part[MT][NT][4];
      float (&dst)[MT][NT][4] = kBlockScale ? part : acc;
      if (kBlockScale) {
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < NT; ++j) part[i][j][0] = part[i][j][1] = part[i][j][2] = part[i][j][3] = 0.0f;
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint32_t ws = Word(wv[uu][j], s);
          const uint32_t b0 = Fp8x2ToT2<T>(ws & 0xFFFFu), b1 = Fp8x2ToT2<T>(ws >> 16);
#pragma unroll
          for (int i = 0; i < MT; ++i) {
            // words 2s, 2s + 1 of the 8 T2 words (16 k) of rows g and g + 8
            const uint4& lo = xv[uu][i][0][s >> 1];
            const uint32_t a0 = Word(lo, 2 * (s & 1)), a2 = Word(lo, 2 * (s & 1) + 1);
            uint32_t a1 = 0u, a3 = 0u;
            if constexpr (!kLow8) {
              const uint4& hi = xv[uu][i][kH - 1][s >> 1];
              a1 = Word(hi, 2 * (s & 1)), a3 = Word(hi, 2 * (s & 1) + 1);
            }
            Mma16816<T>(dst[i][j], a0, a1, a2, a3, b0, b1);
          }
        }
      }
      if (kBlockScale) {
        AddBlockScaledChunk<MT, NT>(acc, part, w_scale, g.n, g.n_scale_blocks, g.bs_log2, g.n_chunks, c0 + uu * kWarps,
                                    n0, t);
      }
    }
  };

  PdlAllowDependents();
  if (weights_early) PrefetchFirstChunks<U, NT>(w, g.n, g.k, g.n_chunks, col, warp, kWarps, t);
  PdlWaitPrimary();  // X is the previous kernel's output
  // Register double buffering across chunk groups: the next group's loads go out before this
  // group's MMAs.
  uint4 wv[U][NT], xv[U][MT][kH][2];
  if (warp < g.n_chunks) load_group(warp, wv, xv);
  for (int c0 = warp; c0 < g.n_chunks; c0 += U * kWarps) {
    uint4 wc[U][NT], xc[U][MT][kH][2];
#pragma unroll
    for (int uu = 0; uu < U; ++uu) {
#pragma unroll
      for (int j = 0; j < NT; ++j) wc[uu][j] = wv[uu][j];
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < kH; ++h) xc[uu][i][h][0] = xv[uu][i][h][0], xc[uu][i][h][1] = xv[uu][i][h][1];
    }
    if (c0 + U * kWarps < g.n_chunks) load_group(c0 + U * kWarps, wv, xv);
    compute_group(c0, wc, xc);
  }

  // value e = 4 i + r of this lane's column tile j, summed over the warps: scale, bias, store
  auto emit = [&](int j, int e, float v) {
    const int i = e >> 2, r = e & 3;
    const int row = m0 + 16 * i + gr + (r >= 2 ? 8 : 0);
    const int c = n0 + 8 * j + 2 * t + (r & 1);
    if (row < g.m && c < g.n) {
      if (!kBlockScale) v *= w_scale[c];
      if (bias) v += LoadF(bias, c);
      y[int64_t(row) * g.n + c] = StoreT<T>(v);
    }
  };
  __shared__ float red[kWarps][MT * 4][32];
  ReduceMmaTiles<MT, NT, kWarps, 1>([&](int i, int j, int r) { return acc[i][j][r]; }, red, nullptr, 0, emit);
}

template <typename T, int MT, int NT, int U, bool kLow8>
cudaError_t LaunchWoMma(const LinearFp8Problem& p, PdlMode pdl, cudaStream_t stream) {
  constexpr int kWarps = 4;
  WoGeom g;
  g.m = static_cast<int>(p.m);
  g.n = static_cast<int>(p.n);
  g.k = static_cast<int>(p.k);
  g.n_chunks = static_cast<int>((p.k + 63) / 64);
  g.bs_log2 = CeilLog2(p.block_size);
  g.n_scale_blocks = static_cast<int>(p.n_scale_blocks);
  const dim3 grid(static_cast<unsigned>((p.n + 8 * NT - 1) / (8 * NT)),
                  static_cast<unsigned>((p.m + 16 * MT - 1) / (16 * MT)));
  const T* x = static_cast<const T*>(p.x);
  const T* bias = static_cast<const T*>(p.bias);
  T* y = static_cast<T*>(p.y);
  if (p.block_size != 0) {
    return LaunchWithPdl(fp8_wo_mma_kernel<T, MT, NT, U, kWarps, true, kLow8>, grid, dim3(32 * kWarps), stream,
                         pdl.launch, x, p.w, p.w_scale, bias, y, g, pdl.weights_early);
  }
  return LaunchWithPdl(fp8_wo_mma_kernel<T, MT, NT, U, kWarps, false, kLow8>, grid, dim3(32 * kWarps), stream,
                       pdl.launch, x, p.w, p.w_scale, bias, y, g, pdl.weights_early);
}

}  // namespace

bool Fp8WeightOnlyFastPath(const LinearFp8Problem& p, size_t elem_bytes) {
  const bool aligned = (reinterpret_cast<uintptr_t>(p.x) & 15) == 0 && (reinterpret_cast<uintptr_t>(p.w) & 15) == 0;
  return elem_bytes == 2 && aligned && p.k % 16 == 0 && (p.block_size == 0 || p.block_size >= 64) &&
         p.m * p.k < (int64_t{1} << 31) && p.n * p.k < (int64_t{1} << 31) && p.m * p.n < (int64_t{1} << 31) &&
         (p.m + 31) / 32 <= 65535;
}

#if PYQUANT_WITH_SM90
namespace {
// The Hopper GEMM's arguments where it may serve p (sm_90, fp16 / bf16, per-channel scales,
// M >= gemm_min_m, CUTLASS can implement it); false otherwise.
//
// Short rows (K <= kWoMmaMaxK) keep the mma kernel while its grid (32 tokens x 32 channels per CTA)
// is at most kWoMmaMaxWaves CTAs per SM: there the GEMM's per-tile latency costs more than the
// kernel's re-reads of X. H100 (bench/results/2026-11-27-h100-s32-fp8wo-small-bench-cuda.md, GEMM /
// mma kernel, us): 576 x 1536 at M = 256: 7.0 / 6.1 (384 CTAs), at M = 1024: 11.0 / 21.9 (1536);
// 576 x 192 at M = 1024: 9.9 / 5.2 (192); 1536 x 576 at M = 1024: 18.5 / 16.6 (576). Long rows take
// the GEMM from gemm_min_m: 4096 x 14336 at M = 64 28.7 / 66.7 (…-s32-fp8wo-gemm-bench-cuda.md).
constexpr int64_t kWoMmaMaxK = 2048;
constexpr int64_t kWoMmaMaxWaves = 6;
template <typename T>
bool WoGemmArgs(const LinearFp8Problem& p, int64_t gemm_min_m, sm90::Fp8WoGemmArgs* a) {
  if (std::is_same<T, float>::value || p.block_size != 0 || p.m < gemm_min_m) return false;
  if (p.m >= (int64_t{1} << 31) || p.n >= (int64_t{1} << 31) || p.k >= (int64_t{1} << 31)) return false;
  int device = 0;
  if (!CurrentDeviceIsSm90(&device)) return false;
  const int64_t mma_ctas = (p.n + 31) / 32 * ((p.m + 31) / 32);
  if (p.k <= kWoMmaMaxK && mma_ctas <= kWoMmaMaxWaves * CudaSmCount(device)) return false;
  a->x = p.x, a->w = p.w, a->w_scale = p.w_scale, a->bias = p.bias, a->y = p.y;
  a->m = static_cast<int>(p.m), a->n = static_cast<int>(p.n), a->k = static_cast<int>(p.k);
  a->device = device;
  return sm90::Fp8WoGemmSupported(*a, std::is_same<T, __nv_bfloat16>::value);
}
}  // namespace
#endif

template <typename T>
size_t Fp8WeightOnlyWorkspaceBytes(const LinearFp8Problem& p, int64_t gemm_min_m) {
#if PYQUANT_WITH_SM90
  sm90::Fp8WoGemmArgs a;
  if (WoGemmArgs<T>(p, gemm_min_m, &a)) return sm90::Fp8WoGemmWorkspaceBytes(a, std::is_same<T, __nv_bfloat16>::value);
#else
  (void)p, (void)gemm_min_m;
#endif
  return 0;
}

template <typename T>
cudaError_t LaunchFp8WeightOnly(const LinearFp8Problem& p, void* ws, size_t ws_bytes, int64_t gemm_min_m,
                                bool force_ref, PdlMode pdl, cudaStream_t stream) {
  if (p.m == 0) return cudaSuccess;
  if (!p.weight_only) return cudaErrorInvalidValue;
  if constexpr (!std::is_same<T, float>::value) {
#if PYQUANT_WITH_SM90
    sm90::Fp8WoGemmArgs a;
    const bool bf16 = std::is_same<T, __nv_bfloat16>::value;
    if (!force_ref && WoGemmArgs<T>(p, gemm_min_m, &a) && sm90::Fp8WoGemmWorkspaceBytes(a, bf16) <= ws_bytes) {
      a.launch.pdl = pdl.launch;
      return sm90::LaunchFp8WoGemm(a, bf16, ws, ws_bytes, stream);
    }
#else
    (void)ws, (void)ws_bytes, (void)gemm_min_m;
#endif
    if (!force_ref && Fp8WeightOnlyFastPath(p, sizeof(T))) {
      cudaError_t e;
      if (p.m <= kFp8GemvAutoMaxM && Fp8GemvFusedFits(p, sizeof(T))) {
        e = LaunchFp8GemvWeightOnly<T>(p, pdl, stream);
      } else if (p.m <= 8) {
        e = LaunchWoMma<T, 1, 1, 4, true>(p, pdl, stream);
      } else if (p.m <= 16) {
        e = LaunchWoMma<T, 1, 1, 2, false>(p, pdl, stream);
      } else {
        e = LaunchWoMma<T, 2, 4, 1, false>(p, pdl, stream);
      }
      return e != cudaSuccess ? e : cudaGetLastError();
    }
  }
  if (p.m > 65535) return cudaErrorInvalidConfiguration;
  const int threads = 128;
  const dim3 grid(static_cast<unsigned>((p.n + threads - 1) / threads), static_cast<unsigned>(p.m));
  fp8_wo_ref_kernel<T><<<grid, threads, 0, stream>>>(static_cast<const T*>(p.x), p.w, p.w_scale,
                                                     static_cast<const T*>(p.bias), static_cast<T*>(p.y), p.m, p.n, p.k,
                                                     p.block_size, p.n_scale_blocks);
  return cudaGetLastError();
}

#define PYQUANT_INSTANTIATE(T)                                                                                \
  template size_t Fp8WeightOnlyWorkspaceBytes<T>(const LinearFp8Problem&, int64_t);                           \
  template cudaError_t LaunchFp8WeightOnly<T>(const LinearFp8Problem&, void*, size_t, int64_t, bool, PdlMode, \
                                              cudaStream_t);
PYQUANT_INSTANTIATE(float)
PYQUANT_INSTANTIATE(__half)
PYQUANT_INSTANTIATE(__nv_bfloat16)
#undef PYQUANT_INSTANTIATE

}  // namespace pyquant
