// Benchmark-selectable variants of the Hopper LinearFp8 GEMM (Fp8GemmTuning::variant, set from
// PYQUANT_FP8_SM90_TILE at kernel creation), fp16 output only (bf16 keeps the default tiles), in
// their own translation unit so that they compile in parallel with fp8_gemm_sm90.cu. Same
// template, problem mapping (swap-AB: channels x tokens x K) and epilogue as the default.
//
//   1 "f128":   128x128x128, FastAccum mainloop (isolates the cost of promotion)
//   2 "f256":   128x256x128, FastAccum (fits in registers without the fp32 copy; 2x the MMA work
//               per B/A byte loaded from smem of the 128x128 tile)
//   3 "c2":     128x128x128, promoting mainloop, 2x1 cluster (TMA multicast of the Xq tile to
//               the two CTAs of neighbouring channel tiles: half the L2 -> SM traffic for B)
//   4 "f256c2": 128x256x128, FastAccum, 2x1 cluster
//   5 "p128":   64x128x128 ping-pong, promoting mainloop: while one consumer warpgroup promotes
//               its accumulators (fp32 adds on the CUDA cores) or runs its epilogue, the other's
//               wgmmas keep the tensor cores busy; in the cooperative kernel both warpgroups
//               promote at the same time. Same accuracy as the default.
//   6 "p128c2": 5 with a 2x1 cluster (Xq tiles multicast to neighbouring channel tiles)
//   7 "p64":    64x64x128 ping-pong, promoting (the default for M <= 64 since session 5)
//   8 "n64":    128x64x128 cooperative, promoting, stream-K (the default for 64 < M <= 128; was for M <= 64)
//   9 "f192":   128x192x128 cooperative, promoting (the default from M = 1536): 1.5x the MMA work per smem byte of the 128x128
//               default; each consumer thread holds 96 fp32 accumulators plus their 96-register
//               promotion copy (the 128x256 tile's 2 x 128 spilled)
//  10 "f192c2": 9 with a 2x1 cluster
//  11 "c128":   128x128x128 cooperative, promoting, 1x1 (the default for M >= 1536 before 9 took over)
//  12 "o128":   128x128x128 cooperative, overlapped promotion (fp8_overlapped_promotion.cuh): the
//               adds of one k-block run under the next k-block's wgmmas; 64 + 2 x 64 registers
//  13 "o256":   128x256x128 cooperative, overlapped promotion in 4 parts of 64 tokens: 128 + 2 x 32
//               registers, where the plain promoting mainloop's 2 x 128 spilled
//  14 "o256c2": 13 with a 2x1 cluster
//  15 "op128":  64x128x128 ping-pong, overlapped promotion
//  16 "o256s":  13 with the second warpgroup's drains one k-block later (staggered)
//               (128x192 in 2 parts of 96 and 64x256 ping-pong in 4 parts spilled: not built)
//
// Why FastAccum is not the default: the Hopper FP8 wgmma accumulator keeps about 13 fraction bits
// (truncating) inside one chain of MMAs. Per MMA (k = 32) the added error is at most about
// 2 * 2^-13 of the magnitude sum of the chain so far, so a chain of c MMAs costs at most about
// c * 2^-12 * sum_k |x w| in the worst case (all products of one sign, where the truncation
// errors do not cancel). With promotion every 4 MMAs (default) that is 4 * 2.4e-4 = 9.8e-4 of
// sum |x w|, half the fp16 / bf16 limit of docs/ops.md (2e-3); every 8 MMAs reaches the limit;
// FastAccum (c = K / 32 = 128 for K = 4096) exceeds it by ~15x for one-signed data, and is within
// it only because random signs cancel. tests/cuda/test_cuda_fp8_paths.py measures both.
#include "cuda/sm90/fp8_gemm_sm90_kernel.cuh"

namespace pyquant {
namespace sm90 {

namespace {

using namespace cute;
using detail::Fp8Gemm;
using Fast = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum;
using H = cutlass::half_t;
using detail::Cooperative;  // the promoting mainloop
using detail::Pingpong;

template <typename F>
auto WithVariant(int variant, bool* found, F&& f) {
  *found = true;
  switch (variant) {
    case 1: return f(Fp8Gemm<H, Shape<_128, _128, _128>, Shape<_1, _1, _1>, Fast>{});
    case 2: return f(Fp8Gemm<H, Shape<_128, _256, _128>, Shape<_1, _1, _1>, Fast>{});
    case 3: return f(Fp8Gemm<H, Shape<_128, _128, _128>, Shape<_2, _1, _1>, Cooperative>{});
    case 4: return f(Fp8Gemm<H, Shape<_128, _256, _128>, Shape<_2, _1, _1>, Fast>{});
    case 5: return f(Fp8Gemm<H, Shape<_64, _128, _128>, Shape<_1, _1, _1>, Pingpong>{});
    case 6: return f(Fp8Gemm<H, Shape<_64, _128, _128>, Shape<_2, _1, _1>, Pingpong>{});
    case 7: return f(Fp8Gemm<H, Shape<_64, _64, _128>, Shape<_1, _1, _1>, Pingpong>{});
    case 8: return f(Fp8Gemm<H, Shape<_128, _64, _128>, Shape<_1, _1, _1>, Cooperative>{});
    case 9: return f(Fp8Gemm<H, Shape<_128, _192, _128>, Shape<_1, _1, _1>, Cooperative>{});
    case 10: return f(Fp8Gemm<H, Shape<_128, _192, _128>, Shape<_2, _1, _1>, Cooperative>{});
    case 11: return f(Fp8Gemm<H, Shape<_128, _128, _128>, Shape<_1, _1, _1>, Cooperative>{});
    case 12: return f(Fp8Gemm<H, Shape<_128, _128, _128>, Shape<_1, _1, _1>, Cooperative, 1>{});
    case 13: return f(Fp8Gemm<H, Shape<_128, _256, _128>, Shape<_1, _1, _1>, Cooperative, 4>{});
    case 14: return f(Fp8Gemm<H, Shape<_128, _256, _128>, Shape<_2, _1, _1>, Cooperative, 4>{});
    case 15: return f(Fp8Gemm<H, Shape<_64, _128, _128>, Shape<_1, _1, _1>, Pingpong, 1>{});
    case 16: return f(Fp8Gemm<H, Shape<_128, _256, _128>, Shape<_1, _1, _1>, Cooperative, 4, true>{});
    // Measured and removed (session 15, b22886c): the overlapped 128 x 128 tile in 2-CTA clusters
    // along channels or tokens, the shape cuBLASLt picks at M = 2048: 3-12 % slower than the
    // 128 x 256 default at M = 1024-4096 (bench/results/2026-11-24-h100-s15-fp8-o128c-bench-cuda.md).
    default: *found = false; return f(Fp8Gemm<H, Shape<_128, _128, _128>, Shape<_1, _1, _1>, Fast>{});
  }
}

}  // namespace

bool Fp8GemmVariantSupported(const Fp8GemmArgs& a) {
  bool found = false;
  const bool ok = WithVariant(a.tune.variant, &found, [&](auto g) { return decltype(g)::CanImplement(a); });
  return found && ok;
}

size_t Fp8GemmVariantWorkspaceBytes(const Fp8GemmArgs& a) {
  bool found = false;
  return WithVariant(a.tune.variant, &found, [&](auto g) { return decltype(g)::WorkspaceBytes(a); });
}

cudaError_t LaunchFp8GemmVariant(const Fp8GemmArgs& a, void* ws, size_t ws_bytes, cudaStream_t stream) {
  bool found = false;
  const bool ok = WithVariant(a.tune.variant, &found, [&](auto g) { return decltype(g)::CanImplement(a); });
  if (!found || !ok) return cudaErrorNotSupported;
  return WithVariant(a.tune.variant, &found, [&](auto g) { return decltype(g)::Run(a, ws, ws_bytes, stream); });
}

}  // namespace sm90
}  // namespace pyquant
