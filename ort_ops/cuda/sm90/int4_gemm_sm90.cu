// Hopper MatMulInt4 GEMM (see int4_gemm_sm90.h for the contract): CUTLASS 3.x collective
// builders, mixed-input wgmma mainloop (TMA loads, the narrow operand decoded in registers).
//
// Problem mapping. MatMulInt4 computes Y[M, N] = X[M, K] * W[N, K]^T. The mixed-input mainloop
// needs the narrow (int4) type as wgmma's register-sourced operand A, K-major, so we run the
// transposed product D = W * X^T in CUTLASS's coordinates (M_c, N_c, K) = (N, M, K):
//   A_c = W      [N, K]  RowMajor (K-major), uint4 codes; row stride = row_bytes * 2 elements
//                        (MatMulInt4's rows are padded to whole blocks; TMA reads only k < K)
//   B_c = X^T    [K, M]  ColumnMajor (K-major): exactly X's row-major bytes
//   D_c = Y^T    [N, M]  ColumnMajor: D_c[n, m] at m * N + n = Y[m, n] row-major
//   scales / zeros [N, n_blocks] as MN-major tensors, i.e. stored [n_blocks, N] (prepared)
//   bias[n]      a per-row (M_c) broadcast in the epilogue: D = acc + bias, rounded once to T
// No software transposes at run time: only the views differ.
//
// Tiles. K tile 64 (one 128-byte TMA row of fp16), so block_size must be a multiple of 64.
// Four configurations; all but Mid "cooperative" (2 consumer warpgroups of 64 rows of M_c each +
// 1 TMA producer warpgroup) with the stream-K tile scheduler, which splits the K loop of the last
// wave over the idle SMs (deterministic reduction of the partial tiles in the workspace): without it,
// M = 64..256 gives only N / 128 tiles, e.g. 32 CTAs for N = 4096 on a 132-SM H100.
//   Narrow: 128 (N) x  64 (M) x 64 (K)   for M <= 64
//   Wide:   128 (N) x 128 (M) x 64 (K)   for M <= 512, unless the next one fills the GPU
//   Mid:     64 (N) x 256 (M) x 64 (K)   ping-pong, for 128 < M <= 512 (where Wide pads to 256
//           tokens as well) when its tiles cover at least 3/4 of the SMs: each consumer
//           warpgroup owns a 64-channel tile and the two take turns on the tensor cores, so one
//           decodes int4 while the other's wgmmas run, and each decoded weight feeds 256 tokens.
//           H100 at M = 256 (bench/results/2026-11-22-h100-s5-pingpong-bench-cuda.md): 59.4 /
//           61.8 us against Wide's 69.4 / 71.7 on 4096 x 14336 / 8192 x 8192 (K x N); on
//           N = 4096 (64 tiles) it is slower.
//   Huge:   128 (N) x 256 (M) x 64 (K)   above: the int4 decode (in the consumer warpgroups, per
//           K tile) is amortised over twice the columns; measured 0.7-0.8x of cuBLAS fp16 with
//           the 128-wide tile at M = 4096 (bench/results/2026-11-22-h100-bench-cuda-int4.md).
//           2x1 cluster: the two CTAs of neighbouring channel tiles receive each X tile through
//           one TMA multicast (half the L2 -> SM traffic of the 16-bit operand); measured 5-11 %
//           faster than 1x1 at M = 4096 and within 2 % at M = 1024 on the four benchmark layers
//           (bench/results/2026-11-22-h100-s4-int4-tiles-bench-cuda.md).
#include "cuda/sm90/int4_gemm_sm90_kernel.cuh"

namespace pyquant {
namespace sm90 {

namespace {

using namespace cute;
using detail::Int4Gemm;

using detail::WithDefaultTiles;

// One tile configuration per M range (above); F is called with the chosen Int4Gemm<Element, ...>.
template <typename Element, typename F>
auto WithConfig(const Int4GemmArgs& a, F&& f) {
  return WithDefaultTiles<Element, detail::Int4WeightFormat::kPacked>(a, f);
}

template <typename F>
auto WithType(bool bf16, const Int4GemmArgs& a, F&& f) {
  return bf16 ? WithConfig<cutlass::bfloat16_t>(a, f) : WithConfig<cutlass::half_t>(a, f);
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// A benchmark variant (int4_gemm_sm90_variants.cu) serves fp16 at every M when selected and it
// can implement the problem.
bool UseVariant(const Int4GemmArgs& a, bool bf16) {
  return a.variant != 0 && a.b_shuffled == nullptr && !bf16 && Int4GemmVariantSupported(a);
}

// The default tiles on the shuffled weight copy, when the op made one and it covers the problem.
bool UseShuffled(const Int4GemmArgs& a, bool bf16) {
  return a.b_shuffled != nullptr && Int4GemmShuffledSupported(a, bf16);
}

}  // namespace

bool Int4GemmSupported(const Int4GemmArgs& a, bool bf16) {
  const bool block_ok = a.block_size == 64 || a.block_size == 128 || a.block_size == 256;
  const bool ok = block_ok && a.m > 0 && a.n > 0 && a.k > 0 && a.k % 32 == 0 && a.n % 8 == 0 && a.row_bytes % 16 == 0 &&
                  Aligned16(a.x) && Aligned16(a.b) && Aligned16(a.y) && Aligned16(a.scales_t) && Aligned16(a.zeros_t) &&
                  (a.bias == nullptr || Aligned16(a.bias));
  return ok && (UseShuffled(a, bf16) || UseVariant(a, bf16) ||
                WithType(bf16, a, [&](auto g) { return decltype(g)::CanImplement(a); }));
}

size_t Int4GemmWorkspaceBytes(const Int4GemmArgs& a, bool bf16) {
  if (UseShuffled(a, bf16)) return Int4GemmShuffledWorkspaceBytes(a, bf16);
  if (UseVariant(a, bf16)) return Int4GemmVariantWorkspaceBytes(a);
  return WithType(bf16, a, [&](auto g) { return decltype(g)::WorkspaceBytes(a); });
}

cudaError_t LaunchInt4Gemm(const Int4GemmArgs& a, bool bf16, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  if (!Int4GemmSupported(a, bf16)) return cudaErrorNotSupported;
  if (UseShuffled(a, bf16)) return LaunchInt4GemmShuffled(a, bf16, workspace, workspace_bytes, stream);
  if (UseVariant(a, bf16)) return LaunchInt4GemmVariant(a, workspace, workspace_bytes, stream);
  return WithType(bf16, a, [&](auto g) { return decltype(g)::Run(a, workspace, workspace_bytes, stream); });
}

}  // namespace sm90
}  // namespace pyquant
