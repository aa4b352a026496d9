// MatMulInt4 on Hopper: the one-time preparation of a node's constant inputs for the sm90 GEMM
// (ort_ops/cuda/sm90/int4_gemm_sm90.h), run at the node's first call (matmul_int4_op.cc):
// transposed scales and zero terms, a finiteness check, and, when asked, the shuffled weight copy.
// Moved out of matmul_int4_impl.cu (the launchers) to keep that file to the dispatch.
#include <cstddef>
#include <cstdint>

#include "cuda/matmul_int4.h"
#include "cuda/matmul_int4_impl.cuh"
#if PYQUANT_WITH_SM90
#include "cuda/sm90/int4_gemm_sm90.h"
#endif

namespace pyquant {

using namespace cuda_detail;

// ---------------------------------------------------------------------------------------------
// sm90 GEMM preparation: scales [N, nb] -> scales_t [nb, N], zeros_t [nb, N] = -zp * s in T
// (one thread per (n, block); coalesced writes, strided reads of a tensor 1/64 of B's size).
// bad: set to 1 when a scale is not finite or -zp * s is not finite in T.
// ---------------------------------------------------------------------------------------------
template <typename T>
__global__ void int4_prepare_sm90_kernel(const T* __restrict__ scales, const uint8_t* __restrict__ zp,
                                         T* __restrict__ scales_t, T* __restrict__ zeros_t, int n, int nb,
                                         int zp_row_bytes, int* __restrict__ bad) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // i = blk * n + col
  if (i >= int64_t(n) * nb) return;
  const int col = static_cast<int>(i % n), blk = static_cast<int>(i / n);
  const T s = scales[int64_t(col) * nb + blk];
  const int z = zp ? Int4ZeroPointAt(zp + int64_t(col) * zp_row_bytes, blk) : kInt4SymmetricZeroPoint;
  const float sf = LoadF(&s, 0);
  const T zt = StoreT<T>(-float(z) * sf);
  scales_t[i] = s;
  zeros_t[i] = zt;
  if (!isfinite(sf) || !isfinite(LoadF(&zt, 0))) atomicOr(bad, 1);
}

namespace {
size_t AlignUp256(size_t v) { return (v + 255) & ~size_t{255}; }

// Bytes of the shuffled weight copy that `knobs` ask for (0: none, or the shape has none).
size_t Sm90WeightCopyBytes(const MatMulInt4Problem& p, const Int4Sm90Prepared& knobs) {
#if PYQUANT_WITH_SM90
  if (!knobs.shuffled_copy) return 0;
  return AlignUp256(sm90::Int4ShuffledBytes(static_cast<int>(p.attrs.n), static_cast<int>(p.attrs.k)));
#else
  (void)p;
  (void)knobs;
  return 0;
#endif
}

}  // namespace

template <typename T>
size_t MatMulInt4Sm90PreparedBytes(const MatMulInt4Problem& p, const Int4Sm90Prepared& knobs, bool with_b_copy) {
  const size_t one = AlignUp256(static_cast<size_t>(p.attrs.n * p.attrs.n_blocks()) * sizeof(T));
  // scales_t, zeros_t, the check flag, the weight copy
  return 2 * one + 256 + (with_b_copy ? Sm90WeightCopyBytes(p, knobs) : 0);
}

template <typename T>
cudaError_t PrepareMatMulInt4Sm90(const MatMulInt4Problem& p, bool with_b_copy, void* dst, cudaStream_t stream,
                                  Int4Sm90Prepared* out, bool* usable) {
  *usable = false;
  const size_t one = AlignUp256(static_cast<size_t>(p.attrs.n * p.attrs.n_blocks()) * sizeof(T));
  T* st = static_cast<T*>(dst);
  T* zt = reinterpret_cast<T*>(static_cast<char*>(dst) + one);
  int* bad = reinterpret_cast<int*>(static_cast<char*>(dst) + 2 * one);
  cudaError_t e = cudaMemsetAsync(bad, 0, sizeof(int), stream);
  if (e != cudaSuccess) return e;
  const int n = static_cast<int>(p.attrs.n), nb = static_cast<int>(p.attrs.n_blocks());
  const int64_t total = int64_t(n) * nb;
  int4_prepare_sm90_kernel<T><<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(
      static_cast<const T*>(p.scales), p.zero_points, st, zt, n, nb,
      static_cast<int>(Int4ZeroPointRowBytes(p.attrs.k, p.attrs.block_size)), bad);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  out->b_shuffled = nullptr;
#if PYQUANT_WITH_SM90
  if (with_b_copy && Sm90WeightCopyBytes(p, *out) != 0) {
    void* copy = static_cast<char*>(dst) + 2 * one + 256;
    e = ShuffleInt4Weights(p.b, Int4RowBytes(p.attrs.k, p.attrs.block_size), n, p.attrs.k, copy, stream);
    if (e != cudaSuccess) return e;
    out->b_shuffled = copy;
  }
#endif
  int host_bad = 1;
  if ((e = cudaMemcpyAsync(&host_bad, bad, sizeof(int), cudaMemcpyDeviceToHost, stream)) != cudaSuccess) return e;
  if ((e = cudaStreamSynchronize(stream)) != cudaSuccess) return e;
  out->scales_t = st;
  out->zeros_t = zt;
  *usable = host_bad == 0;
  return cudaSuccess;
}

#define PYQUANT_INSTANTIATE(T)                                                                             \
  template size_t MatMulInt4Sm90PreparedBytes<T>(const MatMulInt4Problem&, const Int4Sm90Prepared&, bool); \
  template cudaError_t PrepareMatMulInt4Sm90<T>(const MatMulInt4Problem&, bool, void*, cudaStream_t,       \
                                                Int4Sm90Prepared*, bool*);
PYQUANT_INSTANTIATE(float)
PYQUANT_INSTANTIATE(__half)
PYQUANT_INSTANTIATE(__nv_bfloat16)
#undef PYQUANT_INSTANTIATE

}  // namespace pyquant
