// LinearFp8 fused decode GEMV (linear_fp8_gemv_impl.cu): activation quantization + GEMV in one
// kernel for M <= kFp8GemvMaxM, fp16 / bf16, K % 16 == 0, any weight-scale layout.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/pdl.h"
#include "ops/linear_fp8.h"

namespace pyquant {

constexpr int64_t kFp8GemvMaxM = 4;
// PYQUANT_FP8_GEMV=auto uses it at M = 1 (variant 0) and M = 2 (variant 2): at M = 4 the
// per-token FMAs and on-the-fly quantization make it slower than quantizer + mma.sync kernel
// (H100, 4096 x 14336: 42.4 vs 27.5 us; M = 1: 22.0 vs 27.1 us;
// bench/results/2026-11-22-h100-s3-gemv-bench-cuda.md). At M = 2, with PDL, variant 2 is faster
// than the mma.sync pair on all four benchmark layers (8.8 / 24.8 / 24.8 / 26.6 vs 11.0 / 26.6 /
// 27.9 / 31.9 us, …-s4-pdl-variants-bench-cuda.md).
constexpr int64_t kFp8GemvAutoMaxM = 2;
// Variants (rows per CTA, threads per CTA): 0: (4, 128), 1: (2, 128), 2: (8, 128), 3: (4, 256);
// 4: (4, 128) loading the next piece only where there is one (no clamped re-read at the end).
// (Measured and removed, session 16, code: git show f874797: (4, 128) with two pieces per row
// in flight, both loaded before the amax pass. Slower at M = 1 / 2 on three layers, e.g.
// 14336 x 4096 M = 1 26.5 against 23.5 us, 4096^2 8.5 against 7.7; even on 4096 x 14336
// (21.6 / 21.7): bench/results/2026-11-24-h100-s16-fp8ahead-bench-cuda.md. Session 27, code: git show
// f2eb272: rolling L2 prefetches 2 / 4 strides ahead, no registers: within +-6 % of variant 0, not
// one-sided (…-s27-l2-*-bench-cuda.md). Session 46, code: git show ada8711: in this kernel's SASS
// (sm_90a, nvcc 13.0) ptxas issues the next piece's loads after the current piece's arithmetic,
// right before the "cur = nxt" moves that wait for them (a two-buffer ping-pong gets the same
// schedule), so a warp waits one DRAM round trip per piece and only the other warps hide it.
// Variants with the weights through a cp.async ring in shared memory (issued where written, kRing
// - 1 pieces ahead) were no faster at M = 1 (4096 x 14336 17.37 against 17.27 us, 14336 x 4096
// 20.17 against 18.20) and mixed at M = 2 (4096 x 14336 19.30 against 21.22, 14336 x 4096 27.68
// against 19.29): bench/results/2026-11-29-h200-s46-fp8micro.log, bench/device/gemv_micro.sh.)
// 5, 6 (session 47): the chunk kernel (M = 1, per-channel weight scales, not weight_only; else
// variant 0): (rows per CTA, 16-byte pieces per thread and chunk, threads, CTAs per SM) = (4, 2,
// 128, 8) / (8, 1, 256, 4); every load of a chunk issued together, the first chunk before the PDL
// wait (linear_fp8_gemv_impl.cu). Why: a pure weight stream launched like these GEMVs (PDL, loads
// before the wait; bench/device/gemv_micro.cu, op "read") reaches 104-105 % of the copy floor on
// 4096 x 14336 / 4096 x 28672 (13.2 / 26.1 us) and 96 % on 4096^2, where variant 0 took 78-83 % /
// 61 %: the gap is not a per-layer fixed cost but the fused kernel's CTAs holding too few bytes
// in flight. H200, gemv_micro, M = 1, us, variant 0 -> 5 / 6 (…-s47-chunkcap-gemvmicro.log, the
// variants' experiment numbers 13 / 14 there): 4096 x 14336 17.24 -> 16.01 / 16.62; 14336 x 4096
// 18.17 -> 18.02 / 16.56; 8192^2 19.19 -> 19.79 / 18.23; 4096^2 6.49 -> 6.64 / 6.83. Tried in the
// same runs and dropped: one chunk over all of K with 64-512 threads (512-thread CTAs fit one per
// SM: 14336 x 4096 29.1 us), 2 / 16 rows per CTA, 4 pieces per thread, 8 rows with 2 pieces and 6
// CTAs per SM (spills): …-s47-whole / -chunk / -chunkcap-gemvmicro.log. In ORT's chain, same run,
// default (5 / 6 by the rule below) against variant 0, us: 4096 x 14336 16.1 / 17.4, 14336 x 4096
// 16.4 / 18.1, 8192^2 18.1 / 19.1 (…-s47-chunk-bench-cuda.md).
// Measured and removed (session 48, code: git show a71bf1b, fp8_gemv_chunk_loop_kernel): variants 5
// / 6 as persistent CTAs, 4 / 2 per SM, walking the row groups, so that a layer holds at most half
// of an SM and the next layer's CTAs start early (a pure weight stream gains 0.2-0.4 us per layer on
// 4096^2 that way, notes s47). Slower on all four layers at M = 1, us (H200, gemv_micro, 5 / 6 ->
// persistent): 4096 x 14336 16.5 / 17.3 -> 20.7 / 21.3; 14336 x 4096 18.2 / 16.7 -> 19.8 / 18.8;
// 4096^2 6.7 / 6.8 -> 6.9 / 7.2 (variant 0: 6.5): bench/results/2026-11-29-h200-s48-chunk-gemvmicro.log.
// Measured and not kept (session 48: the chunk kernel's kM = 2 instances, launched for variants
// 5-8 at M = 2), (rows, pieces, threads, CTAs per SM by registers) (4, 2, 128, 4), (8,
// 1, 256, 2), (8, 1, 128, 4), (4, 2, 128, 6); slower than variant 2 on all four layers but one tie,
// us, variant 2 against the best of them: 4096 x 14336 21.17 / 21.20; 14336 x 4096 19.26 / 20.04;
// 8192^2 22.17 / 23.53; 4096^2 7.67 / 7.92 (…-s48-m2chunk-gemvmicro.log). Two tokens double the
// per-weight FMAs and the per-piece X quantization while the bytes stay the same.
constexpr int kFp8GemvFusedVariants = 7;  // 0 .. 6 reachable through PYQUANT_FP8_GEMV
// Where the chunk kernel runs (else the variant falls back to 0).
inline bool Fp8GemvChunkFits(const LinearFp8Problem& p) { return p.m == 1 && p.block_size == 0 && !p.weight_only; }
// The variant PYQUANT_FP8_GEMV=auto runs at M (<= kFp8GemvAutoMaxM) on an N x K layer: the chunk
// kernel on the layers of 2^25 weights and more (variant 5 for K <= 4096, 6 above), as measured
// above; 4096^2 keeps variant 0.
constexpr int Fp8GemvAutoVariant(int64_t m, int64_t n, int64_t k) {
  return m == 2 ? 2 : (m == 1 && n * k >= (int64_t{1} << 25)) ? (k <= 4096 ? 5 : 6) : 0;
}
static_assert(Fp8GemvAutoVariant(1, 14336, 4096) == 5 && Fp8GemvAutoVariant(1, 4096, 14336) == 6 &&
                  Fp8GemvAutoVariant(1, 8192, 8192) == 6 && Fp8GemvAutoVariant(1, 4096, 4096) == 0 &&
                  Fp8GemvAutoVariant(2, 14336, 4096) == 2,
              "the measured choices (M, N, K)");

// Shape / type / alignment check (elem_bytes = sizeof(T)); pointers of p must be set.
bool Fp8GemvFusedFits(const LinearFp8Problem& p, size_t elem_bytes);
// p.x, p.w, p.w_scale, p.bias, p.y device pointers; p.x_scale host value. T = __half / __nv_bfloat16.
template <typename T>
cudaError_t LaunchFp8GemvFused(const LinearFp8Problem& p, int variant, PdlMode pdl, cudaStream_t stream);
// The same kernel without the activation quantization, for weight_only = 1 at M <= kFp8GemvAutoMaxM
// (the auto variants' CTA shapes); cudaErrorInvalidValue for other problems.
template <typename T>
cudaError_t LaunchFp8GemvWeightOnly(const LinearFp8Problem& p, PdlMode pdl, cudaStream_t stream);

// The tensor-core fused GEMV (linear_fp8_gemv_tc_impl.cu): activation quantization once per CTA
// into shared memory, e4m3 -> fp16 weights into m16n8k16 MMAs with tokens as the MMA's columns.
// Any M (grid rows of 8 tokens up to M = 8, of 16 above), fp16 / bf16, K % 16 == 0, per-channel
// scales or per-K-blocks of a power of two >= 64; not weight_only.
// Shared memory per CTA: min(M, 8 or 16) rows of K (rounded up to 64) fp16: at most this.
constexpr size_t kFp8GemvTcMaxSmem = 160 * 1024;
// Configurations (PYQUANT_FP8_GEMV=tc = automatic, tc1..tc5 = 1..5, "tc0" is not a name):
// (16-row tiles per group, warps, 64-k units in flight per warp, CTAs per SM the registers must
// allow)
//   0: (1, 4, 4, 6)   1: (1, 8, 4, 3)   2: (1, 16, 4, 2)   3: (2, 16, 4, 1)   4: (2, 8, 4, 2)
//   5: (1, 16, 4, 1), compiled only (session 44, after its device time): 3's one CTA per SM with
//      groups of 16 rows, so that the last round of groups idles fewer SMs: 4096 x 14336 has 448
//      groups of 32 rows for 132 CTAs (4 rounds where 3.4 would do: 85 %), 896 of 16 (7 for 6.8).
// Automatic (kFp8GemvTcDefaultConfig): 3 (NT = 2, 16 warps, one CTA per SM: the fewest CTAs, so
// the least requantization of X). The grid holds the CTAs that fit at once (fewer where there are
// fewer groups); each CTA quantizes X once and walks its groups.
// Measured (H200, bench/results/2026-11-28-h200-s44-tc2-bench-cuda.md, us, tc3 against the
// former default "notc"): faster at M = 4 on the five layers timed (4096 x 14336 21.2 vs 23.3;
// 14336 x 4096 25.0 vs 26.6; 8192^2 24.7 vs 27.1; 4096^2 9.2 vs 10.2; 2048 x 8192 9.1 vs 10.0);
// slower at M = 1 (its X phase at the CTA's start: 19.3 vs 17.4 on 4096 x 14336), at M = 2 on
// three of five (the fused GEMV: 14336 x 4096 21.4 vs 19.1) and at M = 8 on three (8 rows of X
// per CTA: 8192^2 29.7 vs 27.7). Hence "auto" uses it at M = 3-4 only (kFp8GemvTcDefaultMinM /
// MaxM, linear_fp8.h; M = 3 not timed: the kernel's cost does not depend on M up to 8, and the
// former path at M = 3 is the M = 4 one).
// Measured and removed (session 46, code: git show 657b23b, "tcw"): warps owning their 16-row tiles
// over all of K (or 2 / 4 / 8 warps per tile meeting at a named barrier), no CTA barrier per
// group, one CTA of 8 warps per SM. With 8 units of weights in flight in registers per warp it ran
// one DRAM round trip per unit (0.6-0.7 us per unit and warp whatever the warp count; 4096 x 14336
// M = 1: 46.9 us): 16 loads in flight share the warp's 6 scoreboards, so the shared-X read of each
// unit waited on a just-issued DRAM load. Through a per-warp cp.async ring (groups complete in
// order) 20.6 us, still behind the fused GEMV (17.6) at M = 1-8 on four layers, depth 4 / 16
// slower (bench/results/2026-11-29-h200-s46-tcw{,ring}-bench-cuda.md). The scoreboard limit
// applies to this kernel too (D = 4 units x NT = 2 tiles x 2 rows = 16 loads in flight per warp).
constexpr int kFp8GemvTcConfigs = 6;
constexpr int kFp8GemvTcDefaultConfig = 3;
// Shape / type / alignment / shared-memory check (elem_bytes = sizeof(T)); pointers of p set.
bool Fp8GemvTcFits(const LinearFp8Problem& p, size_t elem_bytes);
// config < 0: automatic; max_ctas > 0 caps the grid (else the CTAs that fit at once).
// cudaErrorInvalidValue where Fp8GemvTcFits fails.
template <typename T>
cudaError_t LaunchFp8GemvTc(const LinearFp8Problem& p, int config, int max_ctas, PdlMode pdl, cudaStream_t stream);

}  // namespace pyquant
