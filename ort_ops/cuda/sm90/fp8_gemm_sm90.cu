// Hopper LinearFp8 GEMM (see fp8_gemm_sm90.h for the contract): CUTLASS 3.x collective builders,
// TMA + FP8 wgmma mainloop, warp-specialized cooperative kernel, epilogue visitor tree.
//
// Problem mapping. LinearFp8 computes Y[M, N] = Xq[M, K] * W[N, K]^T (both operands K-major,
// which is what FP8 wgmma wants: it has no transposed smem layouts for 8-bit types). We run the
// transposed product D = W * Xq^T in CUTLASS's coordinates (M_c, N_c, K) = (N, M, K), as the
// INT4 GEMM does, so that the token count M is the tile's N extent (64 / 128 / 256 wide) and the
// 128-row M_c tile of the cooperative kernel is filled by output channels even when M is small:
//   A_c = W      [N, K]  RowMajor (K-major) e4m3
//   B_c = Xq^T   [K, M]  ColumnMajor (K-major): exactly Xq's row-major bytes
//   D_c = Y^T    [N, M]  ColumnMajor: D_c[n, m] at m * N + n = Y[m, n] row-major
// Epilogue (EVT): D_c[n, m] = s_x[m] * (s_w[n] * acc) + bias[n], fp32, one rounding to T:
//   s_w, bias: per M_c row   -> Sm90ColBroadcast (read straight from global by each thread)
//   s_x:       per N_c column -> Sm90RowBroadcast (staged in smem, predicated on M's residue)
// Accumulation: the wgmma accumulators (reduced precision inside the tensor core) move into fp32
// registers after every 128-wide k-block, either in CUTLASS's non-"FastAccum" FP8 mainloop (every
// 4 MMAs of k = 32) or in our overlapped-promotion mainloop (fp8_overlapped_promotion.cuh, same
// numerics, the adds under the next wgmmas); the error limit of docs/ops.md covers what remains.
//
// Tiles (M_c x N_c x K = channels x tokens x K), all with promotion every 128-wide k-block:
//    64 x  64 x 128 ping-pong for M <= 64
//   128 x  64 x 128 cooperative for 64 < M <= 128
//    64 x 128 x 128 ping-pong for M <= 256 when the 128 x 128 tiles would fill less than half
//                   of the SMs (e.g. N = 4096, M = 256: 64 tiles on 132 SMs)
//   128 x 128 x 128 cooperative for M < 1536 (this and the 64 x 128 ping-pong tile with the
//                   overlapped-promotion mainloop in one part since session 14, kOverlapOneTile)
//   128 x 192 x 128 cooperative for 1536 <= M < 2048 (1.5x the MMA work per smem byte; 96
//                   accumulators + their 96-register promotion copy per thread fit where
//                   128 x 256's 2 x 128 spilled; from 1536 on the 192-token tiles pad M by at
//                   most 4 % more than the 128-token ones)
//   128 x 256 x 128 cooperative from M = 2048, with the overlapped-promotion mainloop
//                   (fp8_overlapped_promotion.cuh): the fp32 adds of one 64-token part run under
//                   the next part's wgmmas, and its 128 accumulators + 2 x 32 temporaries per
//                   thread fit. H100, one run, against 128 x 192 (`pyquant_fp8_f192`):
//                   M = 2048: 74.2 / 223.5 / 232.4 / 255.7 us against 81.5 / 246.7 / 257.2 / 275.6;
//                   M = 4096: 140.8 / 459.3 / 451.0 / 522.0 against 163.1 / 498.3 / 536.0 / 557.1
//                   (4096^2, 4096 x 14336, 14336 x 4096, 8192^2; K x N). At M = 1536 it was
//                   slower on every layer (65.0 against 54.6 on 4096^2: 192 tiles of 256 tokens
//                   fill 1.45 waves of 132 SMs), hence kWideMinM
//                   (bench/results/2026-11-24-h100-s14-fp8-tall256-bench-cuda.md).
// Ping-pong: each of the 2 consumer warpgroups owns a whole 64-channel tile and they take turns on
// the tensor cores, so one warpgroup's promotion adds and epilogue overlap the other's wgmmas;
// twice the channel tiles of a 128-row tile, persistent data-parallel scheduler. Cooperative: 2
// consumer warpgroups of 64 channels share a 128-row tile, stream-K tile scheduler (splits the K
// loop of the last wave over idle SMs; deterministic reduction through the workspace).
// H100 (bench/results/2026-11-22-h100-s5-pingpong-bench-cuda.md, fp16 out, with quantizer):
//   M = 64:  64x64 ping-pong 15.0 / 30.0 / 39.8 / 35.7 us against the former 128x64 cooperative
//            18.3 / 30.3 / 53.1 / 37.0 (4096x4096, 4096x14336, 14336x4096, 8192x8192, K x N)
//   M = 128: 128x64 cooperative 16.5 / 31.4 / 45.0 / 36.7 us against 64x128 ping-pong or 128x128
//            17.1 / 31.5 / 50.5 / 37.9 (…-s5-fp8-small-bench-cuda.md)
//   M = 256: 64x128 ping-pong 17.6 / 53.8 us against 20.9 / 59.1 on the two N = 4096 layers; on
//            N = 14336 / 8192 (224 / 128 cooperative tiles) it is slower (50.5 vs 40.5, 54.2 vs 43.8)
//   M >= 1024: the ping-pong tiles are 25-40 % slower than 128 x 128 cooperative (stream-K).
// Benchmark knobs (Fp8GemmTuning, fp8_gemm_sm90.h): promotion interval, decomposition, splits,
// raster order, swizzle are runtime arguments of these same kernels; other tiles / clusters /
// the FastAccum mainloop are separate instantiations in fp8_gemm_sm90_variants.cu.
// No 128 x 256 tile by default: with the promoting FP8 mainloop each consumer thread holds the wgmma
// accumulators plus their fp32 copy (2 x 128 registers for a 64 x 256 warpgroup tile), which
// spilled (684 local loads / stores in the SASS, CUTLASS 4.2, nvcc 13.0). The FastAccum mainloop
// would not spill but accumulates in the tensor core's reduced precision over the whole K
// (variants 2 and 4; see fp8_gemm_sm90_variants.cu for why that is outside the error limit).
#include "cuda/sm90/fp8_gemm_sm90_kernel.cuh"

namespace pyquant {
namespace sm90 {

namespace {

using namespace cute;
using detail::Cooperative;
using detail::Fp8Gemm;
using detail::NoCluster;
using detail::Pingpong;

using SmallTile = Shape<_64, _64, _128>;    // ping-pong
using NarrowTile = Shape<_128, _64, _128>;  // cooperative
using MidTile = Shape<_64, _128, _128>;     // ping-pong
using WideTile = Shape<_128, _128, _128>;   // cooperative
using TallTile = Shape<_128, _192, _128>;   // cooperative, kTallMinM <= M < kWideMinM
constexpr int kTallMinM = 1536;
using WideOverlapTile = Shape<_128, _256, _128>;  // cooperative, overlapped promotion in 4 parts, M >= kWideMinM
constexpr int kWideMinM = 2048;
constexpr int kWideParts = 4;
// The mid (64 x 128 ping-pong) and wide (128 x 128) tiles run the overlapped-promotion mainloop
// whole (1 part: 64 + 2 x 64 registers); 0 would select CUTLASS's promoting mainloop. H100, M = 512:
// 128 x 128 overlapped (`o128`) 20.2 / 71.6 / 66.8 / 71.7 us against 21.8 / 73.1 / 67.4 / 73.6
// promoting (bench/results/2026-11-24-h100-s14-fp8-overlap-bench-cuda.md).
constexpr int kOverlapOneTile = 1;

// Whether 64 x 128 ping-pong tiles serve a problem with 64 < M <= 256: the 128 x 128 tiles would
// occupy fewer than half of the SMs.
bool MidTileFor(const Fp8GemmArgs& a) {
  const int64_t wide_tiles = int64_t((a.n + 127) / 128) * ((a.m + 127) / 128);
  return a.m <= 256 && 2 * wide_tiles < CudaSmCount(a.device);
}

template <typename Element, typename F>
auto WithConfig(const Fp8GemmArgs& a, F&& f) {
  if (a.narrow_tile) return f(Fp8Gemm<Element, NarrowTile>{});
  if (a.m <= 64) return f(Fp8Gemm<Element, SmallTile, NoCluster, Pingpong>{});
  if (a.m <= 128) return f(Fp8Gemm<Element, NarrowTile>{});
  if (MidTileFor(a)) return f(Fp8Gemm<Element, MidTile, NoCluster, Pingpong, kOverlapOneTile>{});
  if (a.m >= kWideMinM) {
    return f(Fp8Gemm<Element, WideOverlapTile, NoCluster, Cooperative, kWideParts>{});
  }
  if (a.m >= kTallMinM) return f(Fp8Gemm<Element, TallTile>{});
  return f(Fp8Gemm<Element, WideTile, NoCluster, Cooperative, kOverlapOneTile>{});
}

template <typename F>
auto WithType(bool bf16, const Fp8GemmArgs& a, F&& f) {
  return bf16 ? WithConfig<cutlass::bfloat16_t>(a, f) : WithConfig<cutlass::half_t>(a, f);
}

// A benchmark variant (fp8_gemm_sm90_variants.cu) serves fp16 outputs when selected and it can
// run the shape; otherwise the default tiles do.
bool UseVariant(const Fp8GemmArgs& a, bool bf16) { return a.tune.variant != 0 && !bf16 && Fp8GemmVariantSupported(a); }

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

bool Fp8GemmSupported(const Fp8GemmArgs& a, bool bf16) {
  const bool ok = a.m > 0 && a.n > 0 && a.k > 0 && a.k % 16 == 0 && a.n % 8 == 0 && Aligned16(a.xq) && Aligned16(a.w) &&
                  Aligned16(a.y) && a.s_x != nullptr && a.w_scale != nullptr;
  return ok && (UseVariant(a, bf16) || WithType(bf16, a, [&](auto g) { return decltype(g)::CanImplement(a); }));
}

size_t Fp8GemmWorkspaceBytes(const Fp8GemmArgs& a, bool bf16) {
  if (UseVariant(a, bf16)) return Fp8GemmVariantWorkspaceBytes(a);
  return WithType(bf16, a, [&](auto g) { return decltype(g)::WorkspaceBytes(a); });
}

cudaError_t LaunchFp8Gemm(const Fp8GemmArgs& a, bool bf16, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream) {
  if (!Fp8GemmSupported(a, bf16)) return cudaErrorNotSupported;
  if (UseVariant(a, bf16)) return LaunchFp8GemmVariant(a, workspace, workspace_bytes, stream);
  return WithType(bf16, a, [&](auto g) { return decltype(g)::Run(a, workspace, workspace_bytes, stream); });
}

}  // namespace sm90
}  // namespace pyquant
