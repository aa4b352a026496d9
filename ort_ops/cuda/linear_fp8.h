// LinearFp8 CUDA launcher: pointers, sizes, stream -> status. Validation and shapes live in
// ops/linear_fp8.h; the ORT op struct is linear_fp8_op.cc; kernels in linear_fp8_impl.cu(h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/pdl.h"
#include "cuda/sm90/launch_control.h"
#include "cuda/staged_split.h"
#include "ops/linear_fp8.h"

namespace pyquant {

// Device scratch the launcher may use: set by the op struct from ORT's allocator.
struct Fp8Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};
// Bytes of scratch LaunchLinearFp8Ref needs (quantized X, row scales): the minimum.
size_t LinearFp8WorkspaceBytes(const LinearFp8Problem& p);
// Smallest M sent to the Hopper GEMM (below it the small-M mma.sync kernel streams W once).
constexpr int64_t kFp8Sm90MinM = 17;
// The same on narrow layers (Fp8Options::sm90_min_m_narrow).
constexpr int64_t kFp8Sm90MinMNarrow = 65;
// Largest M at which the quantizer lets the PDL-launched Hopper GEMM start at once; above it the
// GEMM waits for the quantizer's late trigger (Fp8Options::gemm_pdl_late) or is not PDL-launched.
constexpr int64_t kFp8GemmPdlEarlyMaxM = 512;
// Fp8Options::gemv value of "mmasplit" (the mma kernel with a cluster K split).
constexpr int kFp8GemvMmaSplit = 8;
// Fp8Options::gemv value of "staged" (linear_fp8_staged.h).
constexpr int kFp8GemvStaged = 9;
// Fp8Options::gemv value of "nostaged": "auto" without the staged kernel (the session-20 default).
constexpr int kFp8GemvNoStaged = 10;
// Fp8Options::gemv value of "tc" (linear_fp8_gemv.h, the tensor-core fused GEMV, automatic
// configuration); "tc1".."tc5" follow (configurations 1..5).
constexpr int kFp8GemvTc = 11;
// Fp8Options::gemv value of "notc": "auto" without the tc GEMV (the session-43 default; benchmarks).
constexpr int kFp8GemvNoTc = 17;
// Fp8Options::gemv value of "fused5"; "fused6" follows (the fused GEMV's variants 5 / 6).
constexpr int kFp8GemvFused5 = 18;
// The M range in which "auto" runs the tc GEMV (Fp8GemvTcByDefault, linear_fp8_impl.cu).
constexpr int64_t kFp8GemvTcDefaultMinM = 3;
constexpr int64_t kFp8GemvTcDefaultMaxM = 4;
// The M range in which "auto" runs the staged kernel on sm_90's narrow layers (Fp8StagedByDefault;
// the upper end is Fp8Options::staged_max_m). Up to 64 one grid row of tokens; since session 23 up to
// 128 in two grid rows of 64 tokens on the narrowest layers (ceil(N / 8) <= SMs / 2).
constexpr int64_t kFp8StagedMinM = 3;
constexpr int64_t kFp8StagedMaxM = 128;
// Long-K (K >= kFp8StagedLongK) narrow layers at 64 < M <= kFp8NarrowSplitMaxM, per-channel scales:
// the Hopper GEMM on its 128 x 64 cooperative tile with K split kFp8NarrowSplits ways (Fp8NarrowSplitK).
constexpr int64_t kFp8NarrowSplitMaxM = 256;
constexpr int kFp8NarrowSplits = 4;
// ... and from M = 2 on layers with K >= kFp8StagedLongK (in place of the fused GEMV).
constexpr int64_t kFp8StagedLongK = 8192;

// Kernel choices of one node, fixed when the kernel is created (CudaFp8Options() reads the
// environment; tests and benchmarks set it around session creation). Defaults = production.
struct Fp8Options {
  // PYQUANT_FP8_SM90_MIN_M: smallest M for the Hopper GEMM (a huge value keeps the portable
  // kernels; 1 forces the GEMM down to M = 1).
  int64_t sm90_min_m = kFp8Sm90MinM;
  // Layers with N * K < 2^25 (4096 x 4096 and smaller) start the Hopper GEMM at this M. It was 33
  // while the mma.sync kernel was faster at M = 17..32 there (H100: 16.3 vs 21.8 us on
  // 4096 x 4096, bench/results/2026-11-22-h100-fp8-v2-mid-bench-cuda.md); with the 64 x 64
  // ping-pong tile under PDL the GEMM is: 12.8 / 12.6 / 12.3 vs 14.8 / 14.9 / 15.2 us at
  // M = 17 / 24 / 32 (…-s6-fp8min17-bench-cuda.md). PYQUANT_FP8_SM90_MIN_M sets both.
  int64_t sm90_min_m_small = kFp8Sm90MinM;
  // Narrow layers, where the small-M mma kernel's ceil(N / 8) x ceil(M / 32) CTAs leave SMs idle so
  // that it splits K over sm_90 clusters (kFp8GemvMmaSplit), keep that kernel below this M. H100,
  // bench/results/2026-11-25-h100-s18-narrow-default-bench-cuda.md (column sm90min65 = this rule):
  // 14336 x 512 at M = 32 / 64: 13.6 / 23.0 us against 25.7 / 26.0 for the Hopper GEMM; 4096 x 256:
  // 6.8 / 8.1 against 10.4 / 10.6. At N = 1024 and M > 32 the mma kernel has 2 x 128 CTAs, no
  // split, and the GEMM is faster (8192 x 1024, M = 64: 16.9 vs 23.5 us), so the rule leaves it
  // there. PYQUANT_FP8_SM90_MIN_M sets this too.
  int64_t sm90_min_m_narrow = kFp8Sm90MinMNarrow;
  // PYQUANT_FP8_GEMV: small-M kernel.
  //   0 "auto": the fused GEMV (linear_fp8_gemv.h) at M <= 2 where it fits; the tc GEMV at
  //     kFp8GemvTcDefaultMinM..MaxM (3-4) on sm_90 where it fits and the staged kernel does not serve; on
  //     sm_90's narrow layers at kFp8StagedMinM (2 where K >= kFp8StagedLongK) <= M <= staged_max_m
  //     the staged kernel where Fp8StagedByDefault
  //     (linear_fp8_impl.cu) says, in place of the mma kernel and, at M > 32, of the Hopper GEMM;
  //     else "mmasplit".
  //   1 "mma": fp8_mma_kernel (activations in the MMA's m16 slot, W in n8) for M <= 16, no K split.
  //   2 "swap": fp8_gemv_swap_kernel (W rows in the m16 slot, X^T in n8: half the MMAs), M <= 8,
  //     per-channel scales.
  //   3..7 "fused", "fused1".."fused4": the fused GEMV's variants 0..4 (M <= 4; else "mma").
  //   8 "mmasplit" (kFp8GemvMmaSplit): "mma" in sm_90 clusters of 2 / 4 / 8 CTAs that split K where
  //     ceil(N / 8) CTAs leave SMs idle (narrow layers). The default ("auto") since session 18: H100,
  //     14336 x 512 at M = 4 / 16: 9.3 / 10.6 us against 15.4 / 17.2 without the split, torch fp16
  //     10.1 / 10.3; never slower at M = 4-16 on six narrow layers
  //     (bench/results/2026-11-25-h100-s18-ksplit-narrow-bench-cuda.md). Not at M <= 2: the fused
  //     GEMV is faster there (14336 x 512, M = 1: 8.3 vs 9.2 us).
  //   9 "staged" (kFp8GemvStaged): the staged kernel (linear_fp8_staged.h: xq and W through shared
  //     memory, X loaded once per CTA for 64-128 channels, K split over sm_90 clusters) at every
  //     M below the Hopper GEMM, where it applies (else "mmasplit"). Written in session 20
  //     for the long-K narrow layers at M = 17-64; part of "auto" since session 21.
  //   10 "nostaged" (kFp8GemvNoStaged): "auto" without the staged kernel (benchmarks).
  //   11..16 "tc", "tc1".."tc5" (kFp8GemvTc): the tensor-core fused GEMV (linear_fp8_gemv.h) at every
  //     M below the Hopper GEMM where it fits (else as "mma"), automatic configuration / 1..5.
  //   17 "notc" (kFp8GemvNoTc): "auto" without the tc GEMV (benchmarks).
  //   18, 19 "fused5", "fused6" (kFp8GemvFused5): the fused GEMV's variants 5 / 6 (the chunk
  //     kernel at M = 1 with per-channel scales, else variant 0; M <= 4; else "mma").
  int gemv = 0;
  // PYQUANT_FP8_TC_CTAS (tests): caps the tc GEMV's grid (0: the CTAs that fit at once).
  int tc_max_ctas = 0;
  // PYQUANT_FP8_KSPLIT_FILL (benchmarks): that split's aim, in CTAs per SM (Fp8MmaClusterSplit); it
  // also sets which layers count as narrow for sm90_min_m_narrow.
  int k_split_fill = 1;
  // PYQUANT_FP8_MMA_NT: 8-channel tiles per warp of the mma kernel at M > 16 (fp8_mma_kernel's NT:
  // X is re-read from L2 ceil(N / 8 NT) times). 0 "auto": 4 on sm_90 for K >= 8192 with N >= 1024
  // or M > 32, else 1 (Fp8MmaNt); 1 / 2 / 4.
  int mma_nt = 0;
  // PYQUANT_STAGED_MAX_CLUSTER / PYQUANT_STAGED_SPLIT_Z (both ops; benchmarks): the staged kernel's
  // K split caps (staged_split.h). A cluster of 16 (sm_90's non-portable size) was slower on an
  // H100 (session 22: 14336 x 1024 at M = 64, 27.1 vs 21.7 us;
  // bench/results/2026-11-25-h100-s22-c16-narrow-bench-cuda.md).
  StagedSplitLimits staged_split;
  // PYQUANT_FP8_STAGED_MAX_M (benchmarks): the largest M "auto" sends to the staged kernel
  // (kFp8StagedMaxM; 64 = the session-22 range). PYQUANT_FP8_SM90_MIN_M caps it below that M.
  int64_t staged_max_m = kFp8StagedMaxM;
  // PYQUANT_FP8_STAGED_SHAPE (benchmarks): the staged kernel's CTA shape, 0 "auto"
  // (PlanFp8Staged), 1 "wide" (128 channels x 128 K per stage), 2 "tall" (64 x 256: twice the CTAs).
  int staged_shape = 0;
  // Hopper GEMM knobs (sm90::Fp8GemmTuning, fp8_gemm_sm90.h):
  //   PYQUANT_FP8_SM90_TILE     auto, or a variant's name -> variant 0..16 (the names: the list in
  //                             CudaFp8Options, linear_fp8_op.cc; fp8_gemm_sm90_variants.cu)
  //   PYQUANT_FP8_SM90_PROMOTE  mma_promotion_interval (multiple of 4)
  int sm90_variant = 0, sm90_promote = 0;
  // PYQUANT_FP8_GEMM_PDL: "auto" / "late" (default): the Hopper GEMM under PDL above M = 512 too,
  // with the quantizer triggering it only after its stores, so that the GEMM's CTAs take no SM
  // from the quantizer grid while it runs (H100: 1-4 % faster at M = 1024-4096 on all four
  // benchmark layers, bench/results/2026-11-24-h100-s15-fp8q-bench-cuda.md, column gpdl);
  // "upto512": the GEMM not PDL-launched above M = 512 (the default before session 15: with the
  // quantizer's early trigger its CTAs took SMs from the quantizer grid). Measured alongside and
  // dropped: a persistent warp quantizer with two rows in flight per warp, to overlap X's reads
  // with xq's writes (no faster; 77.6 against 74.1 us on 4096^2 at M = 2048, same file).
  bool gemm_pdl_late = true;
  //   PYQUANT_FP8_SM90_DECOMP / _SPLITS / _RASTER / _SWIZZLE / _REDUCE: the scheduler
  //   (ReadSm90SchedulerTuning, env_knobs.h). Decomposition "auto" (unset): data-parallel for
  //   M <= 256, CUTLASS's stream-K heuristic above; measured 15-20 % faster at M = 48..256 on
  //   4096 x 4096 and equal on 4096 x 14336 (bench/results/2026-11-22-h100-fp8-v2-mid-bench-cuda.md).
  sm90::Sm90SchedulerTuning sm90_sched;
  bool sm90_decomposition_auto = true;
};
Fp8Options CudaFp8Options();

// Bytes of scratch LaunchLinearFp8<T> can use: the minimum plus, where the Hopper GEMM serves
// this problem on the current device, its stream-K workspace (with less, the launcher falls back
// to the portable kernel).
template <typename T>
size_t LinearFp8WorkspaceBytesT(const LinearFp8Problem& p, const Fp8Options& opt);

// p.x, p.w, p.w_scale, p.bias, p.y are device pointers; p.x_scale is a host value.
// LaunchLinearFp8: activation quantization, then on compute capability 9.0 (sm_90a build) the
// CUTLASS FP8 GEMM for M >= opt.sm90_min_m, per-channel scales, fp16 / bf16, K % 16 == 0,
// N % 8 == 0; else the mma.sync kernels when K % 16 == 0 and block_size is 0 or >= 64 (reference
// kernel otherwise). LaunchLinearFp8Ref: quantization + the plain reference GEMM (ground truth;
// PYQUANT_CUDA_KERNELS=ref selects it for every node).
// pdl: programmatic dependent launch of the quantizer and small-M kernels (cuda/pdl.h).
template <typename T>
cudaError_t LaunchLinearFp8(const LinearFp8Problem& p, Fp8Workspace ws, cudaStream_t stream,
                            const Fp8Options& opt = Fp8Options{}, PdlMode pdl = {});
template <typename T>
cudaError_t LaunchLinearFp8Ref(const LinearFp8Problem& p, Fp8Workspace ws, cudaStream_t stream);

}  // namespace pyquant
