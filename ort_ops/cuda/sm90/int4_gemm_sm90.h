// Hopper (sm_90a) MatMulInt4 GEMM for prefill-sized M: a CUTLASS 3.x mixed-input wgmma kernel
// (int4 weights decoded in registers, fp16/bf16 activations through TMA, fp32 accumulators).
// Plain header: no CUTLASS types, so the portable launcher (matmul_int4_impl.cu, all archs) can
// call it; the definitions live in int4_gemm_sm90.cu, compiled for sm_90a only and present when
// PYQUANT_WITH_SM90 is defined.
//
// The kernel reads MatMulInt4's B in place (our layout is already what it wants: N rows of K
// codes, two per byte, low nibble first = K-major uint4). What it cannot read in place are the
// scales: CUTLASS wants them MN-major ([n_blocks, N]) and applies zero points as an additive
// term, w = q * s + z, so the op prepares, once per node, scales_t[g, n] = s[n, g] and
// zeros_t[g, n] = -zp[n, g] * s[n, g] rounded to T (2 x the scales' bytes, ~6 % of the packed
// weights at block 128). That is one more fp16 rounding than the documented (q - zp) * s; the
// error it adds (|z| * 2^-11 per weight) is far inside the op's error limit (docs/ops.md), and
// scales that would overflow or are not finite make the op keep the portable kernels
// (Int4PrepareSm90 reports them).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/sm90/launch_control.h"

namespace pyquant {
namespace sm90 {

// Int4GemmArgs::variant values named here: "p128" (64 x 128 ping-pong tiles,
// int4_gemm_sm90_variants.cu; the default where int4_gemm_sm90.cu's Pingpong128ByDefault says),
// and "coop" (PYQUANT_INT4_SM90_TILE=coop): the default tiles without that rule, i.e. the
// dispatch before session 41 (benchmarks).
constexpr int kInt4Sm90TilePingpong128 = 4;
constexpr int kInt4Sm90TileCooperative = 8;
// "w192" / "p192": 192 tokens per tile (int4_gemm_sm90_variants.cu); the default at
// 128 < M <= 192 on layers of N, K >= 4096 (int4_gemm_sm90.cu, Tile192ByDefault).
constexpr int kInt4Sm90TileWide192 = 9;
constexpr int kInt4Sm90TilePingpong192 = 10;

struct Int4GemmArgs {
  const void* x = nullptr;         // [M, K] T (row-major, K % 32 == 0, 16-byte aligned)
  const uint8_t* b = nullptr;      // [N, row_bytes] packed codes (MatMulInt4 layout), 16-byte aligned
  const void* scales_t = nullptr;  // [n_blocks, N] T
  const void* zeros_t = nullptr;   // [n_blocks, N] T, -zp * s
  const void* bias = nullptr;      // [N] T or nullptr
  void* y = nullptr;               // [M, N] T
  int m = 0, n = 0, k = 0;
  int block_size = 0;  // 64, 128 or 256 (a multiple of the kernel's 64-wide K tile)
  int row_bytes = 0;   // bytes of one B row = n_blocks * block_size / 2
  int device = 0;      // CUDA device ordinal of the pointers
  // Benchmark variant (PYQUANT_INT4_SM90_TILE; int4_gemm_sm90_variants.cu), fp16 only, every
  // M on the Hopper path; 0 = the default tiles (with int4_gemm_sm90.cu's rules, Tile192ByDefault
  // and Pingpong128ByDefault), kInt4Sm90TileCooperative = the default tiles without them. A
  // variant that cannot take the problem leaves the default.
  int variant = 0;
  // The shuffled weight copy (ShuffleInt4Weights), or nullptr: when set (and the copy
  // covers the problem), the GEMM reads it instead of b, with the default tiles or variant 4
  // "p128", 9 "w192" or 10 "p192" (the other variants do not apply to it).
  const uint8_t* b_shuffled = nullptr;
  // Stream-K scheduler knobs (PYQUANT_INT4_SM90_DECOMP / _SPLITS / _REDUCE / _RASTER / _SWIZZLE);
  // all-zero: CUTLASS's heuristic, deterministic reduction.
  Sm90SchedulerTuning sched;
  // The op's default scheduling (no PYQUANT_INT4_SM90_DECOMP): data-parallel where the K loop is
  // short and the output tiles fit one wave (Int4Gemm::MakeArguments, kDataParallelMaxKTiles), else
  // sched (CUTLASS's stream-K heuristic).
  bool decomposition_auto = false;
  Sm90LaunchControl launch;  // PDL after the previous kernel (no pre_launch)
};

// Shapes and alignments the kernel covers (the caller falls back to the portable kernels
// otherwise): block_size in {64, 128, 256}, K % 32 == 0, N % 8 == 0, 16-byte aligned pointers,
// and CUTLASS's can_implement.
bool Int4GemmSupported(const Int4GemmArgs& a, bool bf16);
// Device scratch bytes LaunchInt4Gemm needs (stream-K partial tiles); may be 0.
size_t Int4GemmWorkspaceBytes(const Int4GemmArgs& a, bool bf16);
// Runs y = x * dequant(b)^T + bias on `stream`. bf16 selects __nv_bfloat16 (else __half) for T.
// cudaErrorNotSupported: not covered (see Int4GemmSupported).
cudaError_t LaunchInt4Gemm(const Int4GemmArgs& a, bool bf16, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream);

// The shuffled weight copy (int4_gemm_sm90_shuffled.cu): B re-laid so that each 16 x 16 block of
// codes sits in the order in which one warp's threads hold it as the wgmma A operand
// (Int4ShuffleAtom, int4_gemm_sm90_kernel.cuh). The consumer warpgroups then load a k16 step with
// one 32-bit shared-memory load per thread and decode it without permutes: 7-25 % faster than
// reading B in place at M = 64 ... 4096 on an H100 (bench/results/2026-11-23-h100-s8-int4-shuf-
// fair-bench-cuda.md). It is a second device copy of the codes (N * K / 2 bytes), so the op makes
// it only when asked (PYQUANT_INT4_SHUFFLED_COPY=1, or benchmark variant 7 "shuf"), from a
// constant B, for N % 128 == 0 and K % 64 == 0.
//   Int4ShuffledBytes(n, k): bytes of the copy (0: the shape does not tile)
//   (ShuffleInt4Weights, cuda/matmul_int4.h, writes it: layout/int4_shuffled.h)
//   Int4GemmShuffled*: as Int4GemmSupported / WorkspaceBytes / LaunchInt4Gemm, on a.b_shuffled
size_t Int4ShuffledBytes(int n, int k);
bool Int4GemmShuffledSupported(const Int4GemmArgs& a, bool bf16);
size_t Int4GemmShuffledWorkspaceBytes(const Int4GemmArgs& a, bool bf16);
cudaError_t LaunchInt4GemmShuffled(const Int4GemmArgs& a, bool bf16, void* ws, size_t ws_bytes, cudaStream_t stream);

// The variants' entry points (int4_gemm_sm90_variants.cu); callers use the three above.
bool Int4GemmVariantSupported(const Int4GemmArgs& a);
size_t Int4GemmVariantWorkspaceBytes(const Int4GemmArgs& a);
cudaError_t LaunchInt4GemmVariant(const Int4GemmArgs& a, void* ws, size_t ws_bytes, cudaStream_t stream);

}  // namespace sm90
}  // namespace pyquant
