// MatMulInt4: the tiled mma kernel (matmul_int4_tiled.h), the large-M kernel of the portable path.
// The fragment mapping (one thread = 32 consecutive codes of a B row, k <-> MMA slot) is the one of
// matmul_int4_impl.cu's header comment.
#include "cuda/matmul_int4_tiled.h"

#include <algorithm>

#include "cuda/matmul_int4_impl.cuh"

namespace pyquant {

using cuda_detail::LoadF;
using cuda_detail::StoreT;
using namespace cuda_detail;

// ---------------------------------------------------------------------------------------------
// Large M. grid = (ceil(N / 128), ceil(M / 64)), block = 128 (4 warps).
//   CTA tile 64 (M) x 128 (N); warp w owns columns n0 + 32w .. +31 (4 n8 tiles) for all 64 rows
//   (4 m16 tiles). Per 128-wide K chunk: X[64 x 128] T (16 KB) in shared memory through cp.async
//   (double-buffered; 16-byte piece c of row r stored at piece c ^ ((c >> 3 & 1) << 1) ^ (r & 1),
//   which makes both the cp.async writes and the 16-byte fragment reads conflict-free), weights
//   straight from global into registers, prefetched one chunk ahead.
// ---------------------------------------------------------------------------------------------
namespace {
constexpr int kTileM = static_cast<int>(kInt4TiledRows), kTileN = 128, kTileK = 128;
constexpr int kPiecesPerRow = kTileK / 8;  // 16-byte pieces of one X tile row (16)

__device__ __forceinline__ int SwizzlePiece(int r, int c) { return c ^ (((c >> 3) & 1) << 1) ^ (r & 1); }

}  // namespace

//   Split-K (grid.z > 1, when M x N alone gives too few CTAs): CTA z handles chunks
//   [z * chunks_per_split, (z + 1) * chunks_per_split) and adds its fp32 tile into ws [M, N]
//   (zeroed before; atomicAdd, so the summation order varies run to run at fp32 rounding level);
//   int4_split_finalize_kernel then adds the bias and rounds once to T. ws == nullptr: no split,
//   the CTA stores Y itself.
template <typename T>
__global__ void __launch_bounds__(128)
    int4_tiled_kernel(const T* __restrict__ x, const uint8_t* __restrict__ b, const T* __restrict__ scales,
                      const uint8_t* __restrict__ zp, const T* __restrict__ bias, T* __restrict__ y, Int4Geom g,
                      int chunks_per_split, float* __restrict__ ws) {
  __shared__ __align__(16) uint4 xs[2][kTileM * kPiecesPerRow];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gr = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.y * kTileM;
  const int n0 = blockIdx.x * kTileN + warp * 32;

  auto load_x_tile = [&](int stage, int chunk) {
#pragma unroll
    for (int i = 0; i < kTileM * kPiecesPerRow / 128; ++i) {
      const int idx = threadIdx.x + 128 * i;
      const int r = idx / kPiecesPerRow, c = idx % kPiecesPerRow;
      const int row = m0 + r, kk = chunk * kTileK + 8 * c;
      const bool valid = row < g.m && kk < g.k;
      CpAsync16(&xs[stage][r * kPiecesPerRow + SwizzlePiece(r, c)], valid ? x + int64_t(row) * g.k + kk : x, valid);
    }
    CpAsyncCommit();
  };

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

  WeightFrag<T> wf[4];
  const int c_begin = blockIdx.z * chunks_per_split;
  const int c_end = min(g.n_chunks, c_begin + chunks_per_split);
#pragma unroll
  for (int j = 0; j < 4; ++j) wf[j] = LoadWeightFrag<T>(b, scales, zp, g, n0 + 8 * j + gr, c_begin * kTileK + 32 * t);
  if (c_begin < c_end) load_x_tile(0, c_begin);

  for (int chunk = c_begin; chunk < c_end; ++chunk) {
    const int stage = (chunk - c_begin) & 1;
    // Prefetch the next chunk: X tile into the other stage (its readers finished at the
    // __syncthreads() that ended the previous iteration), weights into registers.
    WeightFrag<T> wn[4];
    if (chunk + 1 < c_end) {
      load_x_tile(stage ^ 1, chunk + 1);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        wn[j] = LoadWeightFrag<T>(b, scales, zp, g, n0 + 8 * j + gr, (chunk + 1) * kTileK + 32 * t);
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();

    const int kv = g.k - (chunk * kTileK + 32 * t);
    const uint4* xt = xs[stage];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      // A pieces: rows 16i + gr and 16i + gr + 8, piece 4t + u (k = 32t + 8u .. +7 of the chunk)
      uint4 a[4][2];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r0 = 16 * i + gr, r1 = r0 + 8;
        a[i][0] = xt[r0 * kPiecesPerRow + SwizzlePiece(r0, 4 * t + u)];
        a[i][1] = xt[r1 * kPiecesPerRow + SwizzlePiece(r1, 4 * t + u)];
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t w[4];
        DecodeWord<T>(wf[j], u, kv, w);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            Mma16816<T>(acc[i][j], Word(a[i][0], 2 * h), Word(a[i][1], 2 * h), Word(a[i][0], 2 * h + 1),
                        Word(a[i][1], 2 * h + 1), w[2 * h], w[2 * h + 1]);
      }
    }
    __syncthreads();
    if (chunk + 1 < c_end) {
#pragma unroll
      for (int j = 0; j < 4; ++j) wf[j] = wn[j];
    }
  }

  if (ws != nullptr) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int row = m0 + 16 * i + gr + (r >= 2 ? 8 : 0), c = n0 + 8 * j + 2 * t + (r & 1);
          if (row < g.m && c < g.n) atomicAdd(ws + int64_t(row) * g.n + c, acc[i][j][r]);
        }
    return;
  }

#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = m0 + 16 * i + gr, c = n0 + 8 * j + 2 * t;
      StorePair<T>(y, bias, g, row, c, acc[i][j][0], acc[i][j][1]);
      StorePair<T>(y, bias, g, row + 8, c, acc[i][j][2], acc[i][j][3]);
    }
}

// ws [M, N] fp32 split-K sums -> y [M, N] T (+ bias [N] T or nullptr), one rounding.
template <typename T>
__global__ void int4_split_finalize_kernel(const float* __restrict__ ws, const T* __restrict__ bias, T* __restrict__ y,
                                           int64_t m, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= m * n) return;
  const float v = ws[i];
  y[i] = StoreT<T>(bias ? v + LoadF(bias, i % n) : v);
}

namespace {

// Split-K factor of the tiled kernel: enough CTAs for ~2 per SM (each K slice >= 4 chunks).
int TiledSplitK(const MatMulInt4Problem& p) {
  static int sms = [] {
    int dev = 0, v = 132;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
    return v;
  }();
  const int64_t ctas = ((p.attrs.n + kTileN - 1) / kTileN) * ((p.m + kTileM - 1) / kTileM);
  const int64_t chunks = (p.attrs.n_blocks() * p.attrs.block_size + 127) / 128;
  int64_t split = (2 * sms + ctas - 1) / ctas;
  split = std::min<int64_t>(split, std::min<int64_t>(8, chunks / 4));
  return split >= 2 ? static_cast<int>(split) : 1;
}

}  // namespace

size_t Int4TiledWorkspaceBytes(const MatMulInt4Problem& p) {
  if (TiledSplitK(p) < 2) return 0;
  return static_cast<size_t>(p.m * p.attrs.n) * sizeof(float);
}

template <typename T>
cudaError_t LaunchInt4Tiled(const MatMulInt4Problem& p, const Int4Geom& g, void* ws, size_t ws_bytes,
                            cudaStream_t stream) {
  const T* x = static_cast<const T*>(p.x);
  const T* s = static_cast<const T*>(p.scales);
  const T* bias = static_cast<const T*>(p.bias);
  T* y = static_cast<T*>(p.y);
  const int64_t n = p.attrs.n;
  const int split = TiledSplitK(p);
  const size_t need = static_cast<size_t>(p.m * n) * sizeof(float);
  const bool use_split = split >= 2 && ws != nullptr && ws_bytes >= need;
  const int cps = use_split ? (g.n_chunks + split - 1) / split : g.n_chunks;
  const unsigned z = use_split ? static_cast<unsigned>((g.n_chunks + cps - 1) / cps) : 1;
  float* acc = use_split ? static_cast<float*>(ws) : nullptr;
  if (use_split) {
    const cudaError_t e = cudaMemsetAsync(acc, 0, need, stream);
    if (e != cudaSuccess) return e;
  }
  dim3 grid(static_cast<unsigned>((n + kTileN - 1) / kTileN), static_cast<unsigned>((p.m + kTileM - 1) / kTileM), z);
  int4_tiled_kernel<T><<<grid, 128, 0, stream>>>(x, p.b, s, p.zero_points, bias, y, g, cps, acc);
  if (use_split) {
    const int64_t total = p.m * n;
    int4_split_finalize_kernel<T><<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(acc, bias, y, p.m, n);
  }
  return cudaGetLastError();
}

template cudaError_t LaunchInt4Tiled<__half>(const MatMulInt4Problem&, const Int4Geom&, void*, size_t, cudaStream_t);
template cudaError_t LaunchInt4Tiled<__nv_bfloat16>(const MatMulInt4Problem&, const Int4Geom&, void*, size_t,
                                                    cudaStream_t);

}  // namespace pyquant
