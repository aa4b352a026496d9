// The K split of the two staged mma kernels (matmul_int4_staged_impl.cu, linear_fp8_staged_impl.cu)
// as the ops configure it, and the device buffers of its second level.
//
// K is split at two levels:
//   * over the ks CTAs of an sm_90 cluster (up to 8, or 16 where asked): the ranks add their
//     partial tiles through distributed shared memory (staged_common.cuh StagedReduceStore);
//   * over grid.z, kz groups of CTAs (session 24): each group adds its cluster-summed slice of the
//     output tile into an fp32 buffer ws[z], and the group that arrives last at the slice's
//     counter adds the kz slices in z order and stores the result.
// Why the second level: a cluster must fit in one GPC (about 16-18 SMs on an H100 / H200), so a
// grid of clusters of 8 or 16 CTAs at one CTA per SM may need more than one wave even with fewer
// CTAs than SMs; groups along grid.z have no placement constraint.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pyquant {

// Caps on the split (PYQUANT_STAGED_MAX_CLUSTER / PYQUANT_STAGED_SPLIT_Z, env_knobs.h): the largest
// cluster (1, 2, 4, 8 or 16) and the largest number of grid.z groups (1 = no second level).
struct StagedSplitLimits {
  int max_cluster = 8;
  int max_kz = 8;  // at most 8 (the kernels' ordered sums are unrolled to 8)
};

// The second level's buffers, as the kernels take them (kz == 1: none, all null).
struct StagedGridSplit {
  float* ws = nullptr;        // [kz][m][n] fp32: group z's partial sums of the whole output
  unsigned* flags = nullptr;  // [gridDim.y][gridDim.x] arrival counters, 0 between launches
  int kz = 1;
};

// Buffers for a launch on `stream` with kz groups of an m x n output over `flag_count` CTA slots:
// kz * m * n floats and flag_count zeroed counters. They are per (device, stream) and shared by all
// nodes of all sessions on that stream: launches on one stream run one after the other (a
// programmatic dependent launch touches them only after griddepcontrol.wait), and the last group
// of each slot re-arms its counter to 0. Grown with cudaMalloc (counters zeroed on the stream) only
// outside CUDA-graph capture; buffers are never freed, since a captured graph keeps the buffers it
// was captured with. Returns a StagedGridSplit with kz = 1 (no second level) when kz <= 1, or when
// the buffers are too small during capture, or on an allocation error (the CUDA error is cleared).
StagedGridSplit StagedSplitBuffers(cudaStream_t stream, int kz, size_t m, size_t n, size_t flag_count);

// One wave where possible: a grid of `tiles` output tiles x kz groups, each a cluster of ks CTAs of
// `kernel` (threads, smem bytes per CTA), runs in one wave only if the GPU holds all its clusters at
// once (cudaOccupancyMaxActiveClusters, cached per kernel, device and ks). A cluster must fit in one
// GPC: an H200 holds 15 clusters of 8 one-CTA-per-SM CTAs, 30 of 4 and 66 of 2 (120 / 120 / 132 CTAs;
// bench/results/2026-11-26-h200-s24-cluster-occupancy.txt), so 16 clusters of 8 took two waves. While
// the clusters do not fit but the CTAs would, ks halves and kz doubles (the same K parts), kz <= max_kz.
void FitStagedSplitToOneWave(const void* kernel, int threads, int smem, int64_t tiles, int max_kz, int* ks, int* kz);

// CTAs of `kernel` (threads, smem bytes per CTA, no cluster) that the current device holds at once,
// cached per kernel, device and shape as above (0 on an error).
int ResidentCtas(const void* kernel, int threads, int smem);

}  // namespace pyquant
