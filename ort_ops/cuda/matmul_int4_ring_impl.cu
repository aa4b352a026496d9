// MatMulInt4 for 5 <= M <= 64: the small-M mma.sync mapping of int4_smallm_kernel
// (matmul_int4_impl.cu: thread t of an n8 tile holds 32 consecutive codes of one B row per 128-wide
// chunk, X read with the same k order, the CTA's warps split K) with the weights streamed through
// a per-warp cp.async ring in shared memory instead of registers.
//
// Why: int4_smallm_kernel keeps its weight prefetch in registers (U chunks x NT tiles x 16 bytes
// per thread, doubled with prefetch), so it can hold only one or two groups in flight per warp;
// at M = 16 on 4096 x 4096 it streams ~0.85 TB/s, about a third of HBM, and grows ~linearly with
// M (bench/results/2026-11-22-h100-s6-mid-bench-cuda.md). Here each warp keeps S - 1 chunks of
// weights (NT x 512 bytes each) in flight in shared memory at no register cost: a warp's next
// chunks load while it decodes and multiplies the current one.
//
// Ring layout (dynamic shared memory, kWarps * S * NT * 512 bytes):
//   [warp][slot 0..S-1][column tile j 0..NT-1][lane 0..31] x 16 bytes
// A lane writes (cp.async) and reads back only its own 16 bytes, so no barrier is needed between
// lanes; the ring is per warp, so none between warps either. Chunk i of a warp (global chunk
// warp + i * kWarps) lives in slot i % S. Scales / zero points (1/64 of the bytes) go through
// registers one chunk ahead.
#include <cstdint>

#include "cuda/matmul_int4_impl.cuh"

namespace pyquant {

using namespace cuda_detail;

namespace {

// cp.async of 16 bytes (zero-filled when !valid, nothing read); "memory" clobbers keep the
// compiler from moving the ring's shared-memory reads across the copies and waits.
__device__ __forceinline__ void RingCopy16(uint32_t smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void RingCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void RingWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ uint4 RingLoad(uint32_t smem) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem)
               : "memory");
  return v;
}

// grid = (ceil(N / (8 * NT)), ceil(M / (16 * MT))), block = 32 * kWarps, dynamic shared memory
// kRingBytes. x [M, K] T, b [N, n_blocks, block_size / 2] uint8, scales [N, n_blocks] T,
// zp [N, ceil(n_blocks / 2)] uint8 or nullptr, bias [N] T or nullptr, y [M, N] T.
template <typename T, int MT, int kWarps, int NT, int S>
__global__ void __launch_bounds__(32 * kWarps, 1)
    int4_ring_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b, const T* __restrict__ scales,
                     const uint8_t* __restrict__ zp, const T* __restrict__ bias, T* __restrict__ y, Int4Geom g,
                     bool weights_early) {
  static_assert(S >= 2, "a ring needs a slot to fill while one is read");
  extern __shared__ __align__(16) uint8_t ring_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gr = lane >> 2, t = lane & 3;
  const int col0 = blockIdx.x * 8 * NT + gr;  // this thread's B row in column tile j: col0 + 8 j
  const int m0 = blockIdx.y * 16 * MT;
  // this lane's 16 bytes of (slot s, tile j): ring + (s * NT + j) * 512
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(ring_smem)) + warp * (S * NT * 512) + lane * 16;
  const int n_mine = warp < g.n_chunks ? (g.n_chunks - 1 - warp) / kWarps + 1 : 0;  // warp-uniform

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

  // Starts the copy of this warp's chunk i into slot i % S; one commit group per chunk, empty past
  // the end, so that "all but the newest S - 1 groups" is always chunk i's.
  auto issue = [&](int i) {
    if (i < n_mine) {
      const int kb = (warp + i * kWarps) * 128 + 32 * t;
      const bool k_in = (kb >> g.bs_log2) < g.nb;  // past the padded row (block 32/64 tails): zeros
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int col = col0 + 8 * j;
        const bool valid = k_in && col < g.n;
        RingCopy16(ring + ((i % S) * NT + j) * 512,
                   b + int64_t(valid ? col : 0) * g.row_bytes + (valid ? (kb >> 1) : 0), valid);
      }
    }
    RingCommit();
  };
  // Scale and zero-point constants of chunk i (scale 0 where the codes are zero-filled: weights
  // exactly 0, never 0 * garbage).
  auto meta = [&](int i, uint32_t (&s2)[NT], uint32_t (&zb2)[NT]) {
    const int blk = ((warp + i * kWarps) * 128 + 32 * t) >> g.bs_log2;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int col = col0 + 8 * j;
      const bool valid = i < n_mine && col < g.n && blk < g.nb;
      const int c = valid ? col : 0, bk = valid ? blk : 0;
      const T s = scales[int64_t(c) * g.nb + bk];
      const int z = zp ? Int4ZeroPointAt(zp + int64_t(c) * g.zp_row_bytes, bk) : kInt4SymmetricZeroPoint;
      s2[j] = valid ? Pack2<T>(s, s) : 0u;
      zb2[j] = ZeroBias2<T>(valid ? z : 0);
    }
  };

  // PDL (cuda/pdl.h): the first S - 1 chunks are in flight while the previous grid drains.
  PdlAllowDependents();
  if (!weights_early) PdlWaitPrimary();
#pragma unroll
  for (int i = 0; i < S - 1; ++i) issue(i);
  uint32_t s2[NT], zb2[NT];
  meta(0, s2, zb2);
  if (weights_early) PdlWaitPrimary();

  for (int i = 0; i < n_mine; ++i) {
    issue(i + S - 1);  // into the slot read in iteration i - 1
    uint32_t s2n[NT], zb2n[NT];
    meta(i + 1, s2n, zb2n);
    RingWait<S - 1>();  // chunk i has landed
    WeightFrag<T> f[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      f[j].q = RingLoad(ring + ((i % S) * NT + j) * 512);
      f[j].s2 = s2[j];
      f[j].zb2 = zb2[j];
    }
    // Fully unrolled, MT = 4 would hoist all 32 X loads of the chunk and spill (ptxas -v).
    Int4ChunkMma<T, MT, NT, true, (MT >= 4 ? 1 : 4)>(acc, x, g, m0, gr, (warp + i * kWarps) * 128 + 32 * t, f);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      s2[j] = s2n[j];
      zb2[j] = zb2n[j];
    }
  }
  RingWait<0>();

  // Sum the warps' partial tiles and store.
  __shared__ float red[kWarps][MT * 4][32];
  Int4ReduceStore<T, MT, NT, kWarps>(acc, red, bias, y, g, m0, blockIdx.x * 8 * NT);
}

template <typename T, int MT, int kWarps, int NT, int S>
void LaunchRing(const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y, const Int4Geom& g,
                PdlMode pdl, cudaStream_t stream) {
  constexpr int kRingBytes = kWarps * S * NT * 512;
  static_assert(kRingBytes + kWarps * MT * 512 <= 48 * 1024, "within the default shared-memory limit");
  // Launch errors are left for the caller's cudaGetLastError().
  (void)LaunchWithPdlSmem(int4_ring_kernel<T, MT, kWarps, NT, S>, SmallMGrid(g, NT, MT), dim3(32 * kWarps), kRingBytes,
                          stream, pdl.launch, x, b, s, zp, bias, y, g, pdl.weights_early);
}

template <typename T, int MT>
void LaunchRingMt(int variant, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y,
                  const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  switch (variant) {
    case 1: LaunchRing<T, MT, 4, 2, 8>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 2: LaunchRing<T, MT, 8, 2, 4>(x, b, s, zp, bias, y, g, pdl, stream); break;
    case 3: LaunchRing<T, MT, 4, 4, 5>(x, b, s, zp, bias, y, g, pdl, stream); break;
    default: LaunchRing<T, MT, 4, 4, 4>(x, b, s, zp, bias, y, g, pdl, stream);
  }
}

}  // namespace

template <typename T>
void LaunchInt4Ring(int variant, int mt, const T* x, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias,
                    T* y, const Int4Geom& g, PdlMode pdl, cudaStream_t stream) {
  if (mt == 1) {
    LaunchRingMt<T, 1>(variant, x, b, s, zp, bias, y, g, pdl, stream);
  } else if (mt == 2) {
    LaunchRingMt<T, 2>(variant, x, b, s, zp, bias, y, g, pdl, stream);
  } else {
    LaunchRingMt<T, 4>(variant, x, b, s, zp, bias, y, g, pdl, stream);
  }
}

template void LaunchInt4Ring<__half>(int, int, const __half*, const uint8_t*, const __half*, const uint8_t*,
                                     const __half*, __half*, const Int4Geom&, PdlMode, cudaStream_t);
template void LaunchInt4Ring<__nv_bfloat16>(int, int, const __nv_bfloat16*, const uint8_t*, const __nv_bfloat16*,
                                            const uint8_t*, const __nv_bfloat16*, __nv_bfloat16*, const Int4Geom&,
                                            PdlMode, cudaStream_t);

}  // namespace pyquant
