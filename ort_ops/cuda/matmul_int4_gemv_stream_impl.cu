// MatMulInt4 decode GEMV that streams B into shared memory with bulk copies (sm_90+, M <= 2,
// row-major B): the "stream" configurations of the CUDA-core GEMV (LaunchInt4GemvStream).
//
// Why: at M = 1 the register GEMV (matmul_int4_gemv_impl.cu) loses a roughly constant 2-3 us per
// layer at the kernel boundary even with PDL (H100, 4096 x 4096: 5.2 us for a 2.9 us floor): its
// 1,024 CTAs fill the SMs, so the next layer's CTAs only start as this layer's exit, and what they
// can load before griddepcontrol.wait is one register-held piece per thread. Here each CTA is
// small enough that the next layer's CTA fits beside it on the same SM (one CTA per SM and layer,
// at most half of the SM's registers and ~1/3 of its shared memory), and it loads its weights into
// a shared-memory ring with cp.async.bulk (one instruction per stage, completion counted by an
// mbarrier) before it waits for the previous layer. So while layer L computes, layer L + 1's
// weights are already streaming: on a chain of layers HBM stays busy across kernel boundaries, and
// a layer whose share fits in the ring (4096 x 4096: 64 KB per SM) is entirely in shared memory
// when its X arrives.
//
// Decomposition: grid = min(#SMs, N) CTAs; CTA c owns the B rows r0 = c N / grid .. r1 - 1, whose
// bytes are contiguous (row-major B: [N, row_bytes]). They stream in stages of R whole rows
// (R * row_bytes <= 32 KB) through a ring of S slots, each slot with its own mbarrier (one
// arrival: thread 0's expect_tx; the bulk copy completes the bytes). The CTA's scales and zero
// points are copied to shared memory once, also before the wait.
//   Threads form `groups` groups of Gs threads (Gs a multiple of 32). Lane li of a group owns the
//   32-code pieces p = li + u Gs (u < kU) of every row, holds the matching 32 activations per token
//   in registers (loaded once after the wait), and group gi computes rows gi, gi + groups, ... of
//   each stage. A row's partial sums meet through a warp shuffle and then red[m][row][warp], summed
//   in warp order at the end (deterministic).
// Numerics: exactly the register GEMV's per piece (GemvMath, matmul_int4_gemv_impl.cuh): the same
// fast chain sums, the same slow path for a piece whose sum or scale is not finite.
//
// Requirements (LaunchInt4GemvStream returns false otherwise; the caller then runs the register
// GEMV): compute capability >= 9.0, T = __half / __nv_bfloat16, M <= 2, block_size >= 32,
// K % 32 == 0, X and B 16-byte aligned, row_bytes <= 32 KB (K <= 65536), the smem plan fits.
#include <algorithm>
#include <atomic>

#include "cuda/device_info.h"
#include "cuda/matmul_int4.h"
#include "cuda/matmul_int4_gemv_impl.cuh"
#include "cuda/matmul_int4_impl.cuh"
#include "cuda/pdl.h"

namespace pyquant {

using namespace cuda_detail;
using namespace gemv_detail;

namespace {

// The host-side plan of one launch (all byte offsets into the dynamic shared memory).
struct StreamPlan {
  int rows_max;     // ceil(N / grid): rows of the largest CTA share
  int rows_stage;   // R: rows per ring stage
  int stages;       // S: ring slots
  int stage_bytes;  // R * row_bytes
  int group_threads;
  int groups;
  int per_thread_copies;  // 1: cp.async.cg 16-byte copies by every thread; 0: bulk copies
  int off_scales, off_zp, off_red, off_bar;
  int smem_bytes;
};

constexpr int kStageTargetBytes = 32 * 1024;
constexpr int kRowsPerIter = 4;
// Weight ring per CTA: with the scales and partial sums, two CTAs (two layers) fit on one SM.
constexpr int kRingBytes = 64 * 1024;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void MbarInit(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SmemAddr(bar)), "r"(count) : "memory");
}
// A stage as bulk copies of at most kBulkChunkBytes each, issued by the lanes of warp 0 (several
// TMA operations in flight per stage rather than one long one); lane 0 arms the barrier first.
constexpr int kBulkChunkBytes = 2048;
__device__ __forceinline__ void BulkLoadChunked(uint8_t* dst, const uint8_t* src, int bytes, uint64_t* bar, int lane) {
  if (lane == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddr(bar)), "r"(bytes)
                 : "memory");
  }
  __syncwarp();
  for (int off = lane * kBulkChunkBytes; off < bytes; off += 32 * kBulkChunkBytes) {
    const int n = min(kBulkChunkBytes, bytes - off);
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            SmemAddr(dst + off)),
        "l"(src + off), "r"(n), "r"(SmemAddr(bar))
        : "memory");
  }
}
// A stage as 16-byte cp.async.cg copies spread over the CTA's threads (L2 -> shared, no L1); each
// thread then arrives on the barrier when its copies have landed (barrier count = threads).
template <int kThreads>
__device__ __forceinline__ void CpAsyncLoad(uint8_t* dst, const uint8_t* src, int bytes, uint64_t* bar) {
  for (int off = threadIdx.x * 16; off < bytes; off += kThreads * 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(SmemAddr(dst + off)), "l"(src + off) : "memory");
  }
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(SmemAddr(bar)) : "memory");
}
__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(SmemAddr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
#endif

// This thread's share of one row: acc[m] = sum over its pieces p = li + u gs of the piece's dot
// product with token m's activations (xp), scaled by the piece's block scale. w_row: the row's
// bytes in shared memory; rr: the row within the CTA's share (its scales / zero points in smem).
template <typename T, int kM, int kU>
__device__ __forceinline__ void RowDot(float (&acc)[kM], const uint8_t* w_row, int rr, int li, int gs, int pieces,
                                       const Int4Geom& g, const T* s_scales, const uint8_t* s_zp,
                                       const typename GemvMath<T>::T2 (&xp)[kM][kU][4][4]) {
  using Math = GemvMath<T>;
  using T2 = typename Math::T2;
#pragma unroll
  for (int m = 0; m < kM; ++m) acc[m] = 0.0f;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int p = li + u * gs;
    if (p >= pieces) continue;
    GemvPiece pc;
    const int blk = (p * 32) >> g.bs_log2;
    pc.q = *reinterpret_cast<const uint4*>(w_row + p * 16);
    const T s = s_scales[rr * g.nb + blk];
    pc.s2 = Pack2<T>(s, s);
    pc.zp = s_zp ? Int4ZeroPointAt(s_zp + rr * g.zp_row_bytes, blk) : kInt4SymmetricZeroPoint;
    const typename Math::Decoder dec(pc);
    float part[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) part[m] = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      T2 wv[4];
      dec.template Word<false>(Word(pc.q, w), wv);
#pragma unroll
      for (int m = 0; m < kM; ++m) part[m] += ChainSum(wv, xp[m][u][w]);
    }
    const float sf = Float2Of(*reinterpret_cast<const T2*>(&pc.s2)).x;
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      if (isfinite(part[m]) && isfinite(sf)) {
        acc[m] = fmaf(part[m], sf, acc[m]);
      } else {  // rare: scaled weights, two-product chains (the note above GemvMath)
        float slow = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          T2 wv[4];
          dec.template Word<true>(Word(pc.q, w), wv);
          slow += ShortChainSum(wv, xp[m][u][w]);
        }
        acc[m] += slow;
      }
    }
  }
}

//   x [M, K] T (M = kM), b [N, row_bytes] codes (row-major), scales [N, nb] T, zp [N, zp_row_bytes]
//   or nullptr, bias [N] T or nullptr, y [M, N] T; grid = min(#SMs, N), block = kThreads, dynamic
//   shared memory = plan.smem_bytes. kU: pieces per thread and row (ceil(K / 32 / kU) <= Gs).
//   weights_early: b / scales / zp are constant initializers (PDL, cuda/pdl.h).
template <typename T, int kM, int kU, int kThreads>
__global__ void __launch_bounds__(kThreads, 2)
    int4_gemv_stream_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b, const T* __restrict__ scales,
                            const uint8_t* __restrict__ zp, const T* __restrict__ bias, T* __restrict__ y, Int4Geom g,
                            StreamPlan plan, bool weights_early) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Math = GemvMath<T>;
  using T2 = typename Math::T2;
  extern __shared__ __align__(128) uint8_t smem[];
  T* s_scales = reinterpret_cast<T*>(smem + plan.off_scales);
  uint8_t* s_zp = smem + plan.off_zp;
  float* red = reinterpret_cast<float*>(smem + plan.off_red);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + plan.off_bar);

  const int r0 = static_cast<int>(int64_t(blockIdx.x) * g.n / gridDim.x);
  const int nr = static_cast<int>(int64_t(blockIdx.x + 1) * g.n / gridDim.x) - r0;
  const int R = plan.rows_stage, S = plan.stages;
  const int n_stages = (nr + R - 1) / R;
  const int tid = threadIdx.x;
  const uint8_t* b_cta = b + int64_t(r0) * g.row_bytes;
  // Stage j (rows j R ..) into slot j % S: warp 0 (bulk copies) or every thread (cp.async).
  auto issue = [&](int j) {
    const int bytes = min(R, nr - j * R) * g.row_bytes;
    uint8_t* dst = smem + (j % S) * plan.stage_bytes;
    const uint8_t* src = b_cta + int64_t(j) * plan.stage_bytes;
    if (plan.per_thread_copies) {
      CpAsyncLoad<kThreads>(dst, src, bytes, &bar[j % S]);
    } else if (tid < 32) {
      BulkLoadChunked(dst, src, bytes, &bar[j % S], tid);
    }
  };

  // The next layer's CTAs may start now: they fit beside this one and stream their own weights.
  PdlAllowDependents();
  if (!weights_early) PdlWaitPrimary();
  if (tid == 0) {
    for (int s = 0; s < S; ++s) MbarInit(&bar[s], plan.per_thread_copies ? kThreads : 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();  // the barriers exist before any copy arrives on them
  for (int j = 0; j < min(S, n_stages); ++j) issue(j);
  {
    const T* sc = scales + int64_t(r0) * g.nb;
    const int ns = nr * g.nb;
#pragma unroll 4
    for (int i = tid; i < ns; i += kThreads) s_scales[i] = sc[i];
    if (zp != nullptr) {
      const uint8_t* zr = zp + int64_t(r0) * g.zp_row_bytes;
      const int nz = nr * g.zp_row_bytes;
      for (int i = tid; i < nz; i += kThreads) s_zp[i] = zr[i];
    }
  }
  if (weights_early) PdlWaitPrimary();  // X and Y only after the previous grid is complete

  const int gs = plan.group_threads;
  const int gi = tid / gs, li = tid % gs, wg = li >> 5, lane = tid & 31;
  const int warps_per_group = gs >> 5;
  const bool active = gi < plan.groups;
  const int pieces = g.k >> 5;
  T2 xp[kM][kU][4][4];  // token m, piece u, code word w: the 8 activations of word w as 4 pairs
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int p = li + u * gs;
    const bool ok = active && p < pieces;
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int w = 0; w < 4; ++w)
        Math::XPairs(ok ? LoadCached16(x + int64_t(m) * g.k + 32 * p + 8 * w) : make_uint4(0, 0, 0, 0),
                     xp[m][u][w]);
  }
  __syncthreads();  // mbarrier init, scales and zero points visible to every thread

  for (int j = 0; j < n_stages; ++j) {
    const int slot = j % S;
    MbarWait(&bar[slot], static_cast<uint32_t>((j / S) & 1));
    const uint8_t* stage = smem + slot * plan.stage_bytes;
    const int rows = min(R, nr - j * R);
    if (active) {
      // kRowsPerIter rows per iteration: independent chains whose loads, FMAs and shuffles
      // interleave (the kernel is latency-bound on 8-16 warps per SM otherwise).
      for (int rl0 = gi; rl0 < rows; rl0 += kRowsPerIter * plan.groups) {
        float acc[kRowsPerIter][kM];
#pragma unroll
        for (int h = 0; h < kRowsPerIter; ++h) {
          const int rl = rl0 + h * plan.groups;
          if (rl < rows) {
            RowDot<T, kM, kU>(acc[h], stage + rl * g.row_bytes, j * R + rl, li, gs, pieces, g, s_scales,
                              zp ? s_zp : nullptr, xp);
          }
        }
#pragma unroll
        for (int h = 0; h < kRowsPerIter; ++h) {
          const int rl = rl0 + h * plan.groups;
#pragma unroll
          for (int m = 0; m < kM; ++m) {
            float v = acc[h][m];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane == 0 && rl < rows) red[(m * plan.rows_max + j * R + rl) * warps_per_group + wg] = v;
          }
        }
      }
    }
    __syncthreads();  // every thread is done with slot j % S
    if (j + S < n_stages) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // our reads before the async refill
      issue(j + S);
    }
  }

  for (int i = tid; i < kM * nr; i += kThreads) {
    const int m = i / nr, rr = i - m * nr;
    const float* rw = red + (m * plan.rows_max + rr) * warps_per_group;
    float v = 0.0f;
    for (int w = 0; w < warps_per_group; ++w) v += rw[w];
    const int n = r0 + rr;
    y[int64_t(m) * g.n + n] = StoreT<T>(bias ? v + LoadF(bias, n) : v);
  }
#endif
}

int AlignUp16(int v) { return (v + 15) & ~15; }

// The plan for `threads` threads, `ring_bytes` of weight ring and kU = u; false when the problem
// does not suit it.
bool MakeStreamPlan(const Int4Geom& g, int grid, int threads, int u, int ring_bytes, int elem_bytes, bool has_zp,
                    StreamPlan* plan) {
  if (g.row_bytes > kStageTargetBytes) return false;
  const int pieces = g.k >> 5;
  StreamPlan p{};
  p.rows_max = (g.n + grid - 1) / grid;
  p.rows_stage = std::max(1, std::min(p.rows_max, kStageTargetBytes / g.row_bytes));
  p.stage_bytes = p.rows_stage * g.row_bytes;
  const int stages_needed = (p.rows_max + p.rows_stage - 1) / p.rows_stage;
  p.stages = std::max(1, std::min(stages_needed, ring_bytes / p.stage_bytes));
  p.group_threads = ((pieces + u - 1) / u + 31) / 32 * 32;
  if (p.group_threads > threads) return false;
  p.groups = threads / p.group_threads;
  int off = p.stages * p.stage_bytes;
  p.off_scales = off = AlignUp16(off);
  off += p.rows_max * g.nb * elem_bytes;
  p.off_zp = off = AlignUp16(off);
  if (has_zp) off += p.rows_max * g.zp_row_bytes;
  p.off_red = off = AlignUp16(off);
  off += g.m * p.rows_max * (p.group_threads / 32) * static_cast<int>(sizeof(float));
  p.off_bar = off = AlignUp16(off);
  off += p.stages * static_cast<int>(sizeof(uint64_t));
  p.smem_bytes = off;
  *plan = p;
  return true;
}

// Dynamic shared memory the kernels may use: two CTAs (this layer's and the next one's) per SM.
constexpr int kStreamSmemCap = 112 * 1024;

template <typename T, int kM, int kU, int kThreads>
cudaError_t LaunchStream(const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y,
                         const Int4Geom& g, int grid, const StreamPlan& plan, PdlMode pdl, cudaStream_t stream) {
  auto kernel = int4_gemv_stream_kernel<T, kM, kU, kThreads>;
  // Over 48 KB of dynamic shared memory needs an opt-in, once per device and template instance.
  static std::atomic<uint64_t> smem_set_on{0};
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const uint64_t dev_bit = dev < 64 ? uint64_t{1} << dev : 0;
  if (dev_bit == 0 || (smem_set_on.load(std::memory_order_acquire) & dev_bit) == 0) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kStreamSmemCap);
    if (e != cudaSuccess) return e;
    smem_set_on.fetch_or(dev_bit, std::memory_order_acq_rel);
  }
  return LaunchWithPdlSmem(kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads),
                           static_cast<size_t>(plan.smem_bytes), stream, pdl.launch, x, b, s, zp, bias, y, g, plan,
                           pdl.weights_early);
}

template <typename T, int kThreads, int kMaxU>
bool TryLaunch(bool per_thread_copies, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y,
               const Int4Geom& g, PdlMode pdl, cudaStream_t stream, cudaError_t* err) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  const int grid = std::min(CudaSmCount(dev), g.n);
  if (grid <= 0) return false;
  const int pieces = g.k >> 5;
  int u = 1;
  while (u < kMaxU && (pieces + u - 1) / u > kThreads) u *= 2;
  if (g.m == 2 && u > 1) return false;  // kM * kU <= 2 x 1 or 1 x kMaxU: the register budget
  StreamPlan plan;
  if (!MakeStreamPlan(g, grid, kThreads, u, kRingBytes, static_cast<int>(sizeof(T)), zp != nullptr, &plan) ||
      plan.smem_bytes > kStreamSmemCap) {
    return false;
  }
  plan.per_thread_copies = per_thread_copies ? 1 : 0;
  if (g.m == 2) {
    *err = LaunchStream<T, 2, 1, kThreads>(x, b, s, zp, bias, y, g, grid, plan, pdl, stream);
  } else if (u == 1) {
    *err = LaunchStream<T, 1, 1, kThreads>(x, b, s, zp, bias, y, g, grid, plan, pdl, stream);
  } else if constexpr (kMaxU >= 2) {
    if (u == 2) {
      *err = LaunchStream<T, 1, 2, kThreads>(x, b, s, zp, bias, y, g, grid, plan, pdl, stream);
    } else if constexpr (kMaxU >= 4) {
      *err = LaunchStream<T, 1, 4, kThreads>(x, b, s, zp, bias, y, g, grid, plan, pdl, stream);
    }
  }
  return true;
}

}  // namespace

template <typename T>
bool LaunchInt4GemvStream(int config, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y,
                          const Int4Geom& g, PdlMode pdl, cudaStream_t stream, cudaError_t* err) {
  *err = cudaSuccess;
  if (CurrentDeviceComputeCapability() < 90 || g.m < 1 || g.m > 2 || g.k % 32 != 0 || g.bs_log2 < 5) return false;
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(b)) & 15) return false;
  const bool per_thread_copies = (config & 2) != 0;
  if (config & 1) return TryLaunch<T, 512, 1>(per_thread_copies, x, b, s, zp, bias, y, g, pdl, stream, err);
  return TryLaunch<T, 256, 4>(per_thread_copies, x, b, s, zp, bias, y, g, pdl, stream, err);
}

template bool LaunchInt4GemvStream<__half>(int, const __half*, const uint8_t*, const __half*, const uint8_t*,
                                           const __half*, __half*, const Int4Geom&, PdlMode, cudaStream_t,
                                           cudaError_t*);
template bool LaunchInt4GemvStream<__nv_bfloat16>(int, const __nv_bfloat16*, const uint8_t*, const __nv_bfloat16*,
                                                  const uint8_t*, const __nv_bfloat16*, __nv_bfloat16*,
                                                  const Int4Geom&, PdlMode, cudaStream_t, cudaError_t*);

}  // namespace pyquant
