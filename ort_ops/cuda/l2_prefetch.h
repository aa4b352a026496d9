// Weight prefetch into L2 ahead of a decode kernel (sm_90+, under programmatic dependent launch).
//
// Why: at M = 1 a layer streams its weights once, and every kernel boundary costs about 2 us on
// an H100 whatever the layer size (FP8 4096 x 4096: 7.6 us against a 5.6 us floor; 4096 x 14336:
// 21.6 against 19.8; bench/results/2026-11-24-h100-s14-fp8-final-bench-cuda.md). The GEMV's
// ~1,000 CTAs fill the SMs, so the next layer's CTAs start only as this layer's exit, and HBM
// idles while the last CTAs reduce and the next ones pass griddepcontrol.wait. Staging the next
// layer's weights in shared memory was slower (session 13: the staging CTA holds half an SM).
// An L2 prefetch holds nothing: a grid of a few 32-thread CTAs, which fits beside the GEMV's,
// issues cp.async.bulk.prefetch.L2 for the next layer's weights while this layer still runs, so
// HBM stays busy across the boundary and the next GEMV's loads hit L2.
//
// Order: LaunchL2Prefetch is launched with the PDL attribute right before the kernel that reads
// the ranges (itself PDL-launched). Its CTAs call griddepcontrol.launch_dependents first and
// griddepcontrol.wait last, so the grid completes only after the grid before it has; the kernel
// after it, which waits for the prefetch grid's completion before reading X, therefore still sees
// everything the earlier grid wrote. Only constant initializers may be prefetched (the same rule
// as PdlMode::weights_early, cuda/pdl.h): nothing writes them while the prefetch runs.
//
// Budget: at most kL2PrefetchL2Percent of the device's L2, filled from the start of the ranges in
// order (a decode kernel's first CTAs read the first rows), so that this layer's lines and the
// prefetched ones fit together.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pyquant {

// One contiguous device range to prefetch.
struct L2PrefetchRange {
  const void* ptr = nullptr;
  size_t bytes = 0;
};
constexpr int kL2PrefetchMaxRanges = 4;
constexpr int kL2PrefetchL2Percent = 40;  // H100: 20 of 50 MB
// PYQUANT_L2_PREFETCH (read at kernel creation): the largest M whose decode kernels get the
// prefetch; 0 = never. Default: kL2PrefetchDefaultMaxM.
constexpr int64_t kL2PrefetchDefaultMaxM = 0;
int64_t CudaL2PrefetchMaxM();

// Bytes the prefetch may fill on the current device (0 where cp.async.bulk.prefetch is missing).
size_t L2PrefetchBudget();

// Launches the prefetch grid (PDL attribute set) for ranges[0 .. n) up to L2PrefetchBudget().
// n <= kL2PrefetchMaxRanges. A no-op (cudaSuccess) before sm_90 or when nothing fits.
cudaError_t LaunchL2Prefetch(const L2PrefetchRange* ranges, int n, cudaStream_t stream);

}  // namespace pyquant
