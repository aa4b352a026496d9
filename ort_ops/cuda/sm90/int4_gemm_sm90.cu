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

// The 64 x 128 ping-pong tiles (variant 4 "p128", int4_gemm_sm90_variants.cu; on B in the shuffled
// order int4_gemm_sm90_shuffled.cu) by default on fp16, for kNarrowMaxM < M <= kWideMaxM and
// K <= kPingpong128MaxK, where their grid of ceil(N / 64) x ceil(M / 128) tiles covers a third to
// all of the SMs in one wave. Why: there the cooperative Wide tiles (128 x 128) give half the
// tiles, the stream-K scheduler splits their K loops over the idle SMs, and each CTA decodes int4
// in both consumer warpgroups at once while the tensor cores wait; the ping-pong CTAs keep whole K
// loops and overlap one warpgroup's decode with the other's wgmmas. With long rows those whole K
// loops lose to the stream-K split: every win measured has K <= 4096, every loss in the band
// K >= 8192. H200, us, default (cooperative) -> p128 (torch fp16):
//   4096 x 4096 at M = 96 / 128 / 192 / 256 (64 / 64 / 128 / 128 tiles): 25.5-25.9 / 25.4-26.0 /
//     28.8-29.2 / 28.4-30.1 -> 21.4-21.6 / 21.5-21.8 / 23.9-24.4 / 22.4-24.5 (14-19);
//   2048 x 8192 (K x N) at M = 96 / 128 (128 tiles), B row-major: 21.4 / 21.5 -> 12.7 / 12.8;
//     shuffled (its default since session 42): 19.3 / 19.7 -> 11.4 / 11.2 (11.3 / 11.7);
//   losses in the band: 8192 x 2048 at M = 192 / 256 (64 tiles) 32.5 / 32.2 -> 40.7 / 40.9;
//     14336 x 4096 (shuffled) at M = 96 / 128 38.0 / 38.8 -> 56.9 / 58.3; 8192^2 (shuffled)
//     40.0 / 39.7 -> 40.9 / 41.1
// (bench/results/2026-11-28-h200-s41-{p128,p128all,sqgemm}-bench-cuda.md, …-s42-{p128,wide}-bench-cuda.md).
// Outside the band it loses too: 2048 x 8192 at M = 192 / 256 (256 tiles) 19.8 / 17.7 -> 24.9 /
// 26.9; 4096 x 4096 at M = 512 (256 tiles) 31.4 -> 49.2. Not measured on bf16 (no bf16 instance).
constexpr int64_t kPingpong128MaxK = 4096;
constexpr bool Pingpong128ByDefault(int64_t n, int64_t k, int64_t m, int sms) {
  const int64_t tiles = (n + 63) / 64 * ((m + 127) / 128);
  return m > detail::kNarrowMaxM && m <= detail::kWideMaxM && k <= kPingpong128MaxK && 3 * tiles >= sms && tiles <= sms;
}
static_assert(Pingpong128ByDefault(4096, 4096, 96, 132) && Pingpong128ByDefault(4096, 4096, 256, 132) &&
                  Pingpong128ByDefault(8192, 2048, 128, 132),
              "the measured wins (N, K, M; comment above)");
static_assert(!Pingpong128ByDefault(4096, 4096, 64, 132) && !Pingpong128ByDefault(4096, 4096, 512, 132) &&
                  !Pingpong128ByDefault(2048, 8192, 128, 132) && !Pingpong128ByDefault(2048, 8192, 256, 132) &&
                  !Pingpong128ByDefault(8192, 2048, 192, 132) && !Pingpong128ByDefault(4096, 14336, 128, 132) &&
                  !Pingpong128ByDefault(8192, 8192, 128, 132),
              "the measured losses (N, K, M), and M = 64 (the Narrow tiles' range)");

// 192 tokens per tile for 128 < M <= 192 (one token tile; the default tiles pad such M to 256, and
// above 192 two 192-token tiles pad more than one of 256), on layers of N, K >= 4096: 64 x 192
// ping-pong ("p192") where p128's conditions hold (N / 64 <= SMs, K <= kPingpong128MaxK), else
// 128 x 192 cooperative ("w192"). H200, same runs, us, the default (p128 on 4096^2, Mid 64 x 256
// ping-pong or cooperative elsewhere) -> the 192 tile (torch fp16), M = 129 / 144 / 160 / 176 / 192:
//   4096^2 (p192): 31.6 / 27.9 / 28.8 / 25.3 / 24.7 -> 23.0 / 24.3 / 23.0 / 25.0 / 22.9 (13-20)
//   4096 x 14336 (w192): 87.2 / 78.6 / 76.9 / 72.7 / 65.1 -> 37.7 / 36.3 / 39.0 / 38.6 / 40.5 (35-44)
//   14336 x 4096 (w192): 63.0 / 59.4 / 58.5 / 56.2 / 57.5 -> 53.0 / 47.8 / 46.6 / 49.1 / 47.9 (42-50)
//   8192^2 (w192): 83.5 / 82.6 / 79.8 / 75.7 / 68.5 -> 50.1 / 47.8 / 49.6 / 48.4 / 51.7 (41-51;
//     p192 55.2 / 53.3 / 45.8 / 55.0 / 49.2)
// (bench/results/2026-11-28-h200-s43-t192-bench-cuda.md, …-s43-t192b-bench-cuda.md). At M = 224 /
// 256 both 192 tiles lose (1.4-3x slower). Smaller layers (2048 wide) are not measured and keep the
// tiles above.
constexpr int Tile192ByDefault(int64_t n, int64_t k, int64_t m, int sms) {
  if (m <= 128 || m > 192 || n < 4096 || k < 4096) return 0;
  return (n + 63) / 64 <= sms && k <= kPingpong128MaxK ? kInt4Sm90TilePingpong192 : kInt4Sm90TileWide192;
}
static_assert(Tile192ByDefault(4096, 4096, 129, 132) == kInt4Sm90TilePingpong192 &&
                  Tile192ByDefault(14336, 4096, 192, 132) == kInt4Sm90TileWide192 &&
                  Tile192ByDefault(4096, 14336, 160, 132) == kInt4Sm90TileWide192 &&
                  Tile192ByDefault(8192, 8192, 144, 132) == kInt4Sm90TileWide192,
              "the measured wins (N, K, M; comment above)");
static_assert(Tile192ByDefault(4096, 4096, 128, 132) == 0 && Tile192ByDefault(4096, 4096, 193, 132) == 0 &&
                  Tile192ByDefault(8192, 2048, 160, 132) == 0 && Tile192ByDefault(2048, 8192, 160, 132) == 0,
              "outside: M <= 128 or > 192, layers narrower than 4096 (N, K, M)");

// The variant a call runs: the one PYQUANT_INT4_SM90_TILE asked for (kInt4Sm90TileCooperative:
// the default tiles without the rules above), else a 192-token tile or p128 where the rules pick
// them, else 0 (the default tiles).
int VariantFor(const Int4GemmArgs& a, bool bf16) {
  if (a.variant == kInt4Sm90TileCooperative) return 0;
  if (a.variant != 0 || bf16) return a.variant;
  const int sms = CudaSmCount(a.device);
  if (const int t192 = Tile192ByDefault(a.n, a.k, a.m, sms)) return t192;
  return Pingpong128ByDefault(a.n, a.k, a.m, sms) ? kInt4Sm90TilePingpong128 : 0;
}

// a with its variant resolved (VariantFor).
Int4GemmArgs Resolved(const Int4GemmArgs& a, bool bf16) {
  Int4GemmArgs r = a;
  r.variant = VariantFor(a, bf16);
  return r;
}

// A variant (int4_gemm_sm90_variants.cu) serves fp16 when selected (r: resolved) and it can
// implement the problem.
bool UseVariant(const Int4GemmArgs& r, bool bf16) {
  return r.variant != 0 && r.b_shuffled == nullptr && !bf16 && Int4GemmVariantSupported(r);
}

// The shuffled weight copy (default tiles, or p128), when the op made one and it covers the
// problem (a: resolved).
bool UseShuffled(const Int4GemmArgs& a, bool bf16) {
  return a.b_shuffled != nullptr && Int4GemmShuffledSupported(a, bf16);
}

}  // namespace

bool Int4GemmSupported(const Int4GemmArgs& a, bool bf16) {
  const bool block_ok = a.block_size == 64 || a.block_size == 128 || a.block_size == 256;
  const bool ok = block_ok && a.m > 0 && a.n > 0 && a.k > 0 && a.k % 32 == 0 && a.n % 8 == 0 && a.row_bytes % 16 == 0 &&
                  Aligned16(a.x) && Aligned16(a.b) && Aligned16(a.y) && Aligned16(a.scales_t) && Aligned16(a.zeros_t) &&
                  (a.bias == nullptr || Aligned16(a.bias));
  const Int4GemmArgs r = Resolved(a, bf16);
  // B rewritten in place (b == b_shuffled): only the shuffled-order instances can read it; the
  // row-major fallbacks below would read its bytes in the wrong order.
  if (a.b_shuffled != nullptr && a.b_shuffled == a.b) return ok && UseShuffled(r, bf16);
  return ok && (UseShuffled(r, bf16) || UseVariant(r, bf16) ||
                WithType(bf16, a, [&](auto g) { return decltype(g)::CanImplement(a); }));
}

size_t Int4GemmWorkspaceBytes(const Int4GemmArgs& a, bool bf16) {
  const Int4GemmArgs r = Resolved(a, bf16);
  if (UseShuffled(r, bf16)) return Int4GemmShuffledWorkspaceBytes(r, bf16);
  if (UseVariant(r, bf16)) return Int4GemmVariantWorkspaceBytes(r);
  return WithType(bf16, a, [&](auto g) { return decltype(g)::WorkspaceBytes(a); });
}

cudaError_t LaunchInt4Gemm(const Int4GemmArgs& a, bool bf16, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  if (!Int4GemmSupported(a, bf16)) return cudaErrorNotSupported;
  const Int4GemmArgs r = Resolved(a, bf16);
  if (UseShuffled(r, bf16)) return LaunchInt4GemmShuffled(r, bf16, workspace, workspace_bytes, stream);
  if (UseVariant(r, bf16)) return LaunchInt4GemmVariant(r, workspace, workspace_bytes, stream);
  return WithType(bf16, a, [&](auto g) { return decltype(g)::Run(a, workspace, workspace_bytes, stream); });
}

}  // namespace sm90
}  // namespace pyquant
