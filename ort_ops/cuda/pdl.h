// Programmatic dependent launch (PDL, sm_90+) for the decode GEMVs: the next kernel in the stream
// starts while the previous one drains.
//
// Why: at M = 1 a layer's weights stream in 3-12 us, and each kernel boundary cost about 3.5 us
// of that on an H100 whatever the layer size (launch, the first DRAM round trip, the last wave's
// tail): the INT4 GEMV reached 74-75 % of the HBM floor on the large layers and 45 % on
// 4096 x 4096 (bench/results/2026-11-22-h100-s3-final-bench-cuda.md). With PDL the CTAs of the
// next GEMV are scheduled as the previous grid's CTAs exit, issue their weight loads (constant
// initializers: no kernel writes them) and wait at griddepcontrol.wait until the previous grid
// has completed and its writes are visible; only then do they read X or write Y.
//
// Contract of a kernel launched with PdlMode::launch:
//   * PdlWaitPrimary() comes before its first read of any input that is not constant for the
//     session, and before its first global write;
//   * before it, only inputs that ORT reports as constant initializers are read (weights_early);
//     otherwise the kernel waits first;
//   * PdlAllowDependents() lets the next PDL-launched kernel start once every CTA of this grid has
//     called it or exited; that kernel still waits for this grid's completion before it reads
//     what this grid wrote.
// Kernels launched without the attribute, and GPUs before sm_90, see both calls as no-ops, and a
// kernel that follows a PDL grid without the attribute is serialised as usual.
//
// Measured and dropped (session 15, H100, bench/results/2026-11-24-h100-s15-prefetch*-bench-cuda.md):
// asking L2 for the next layer's weights with cp.async.bulk.prefetch.L2 to shorten the boundary
// further. (1) A separate grid of 32-thread CTAs between two layers (launch_dependents first,
// griddepcontrol.wait last, to keep the order): slower at M = 1 on every layer, 4096^2 INT4
// 10.1 against 5.1 us, since its own completion adds a second boundary to the chain. (2) Each
// GEMV CTA prefetching its whole rows before its wait: even where every weight is already in
// registers before the wait (INT4, K = 4096), else slower (FP8 4096^2 9.6 against 7.7 us,
// 14336 x 4096 30.7 against 23.9).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "cuda/device_info.h"

namespace pyquant {

// How one launch may overlap the kernel before it.
struct PdlMode {
  bool launch = false;         // launch with programmatic stream serialization
  bool weights_early = false;  // the kernel may load its weights before the previous grid completes
};

// PYQUANT_CUDA_PDL (read at kernel creation): "1" / unset = PDL with early weight loads where
// the weights are constant; "late" = PDL, but wait before any load; "0" = off.
enum class PdlSetting { kOff = 0, kOn = 1, kLate = 2 };
inline PdlSetting CudaPdlSetting() {
  const char* v = std::getenv("PYQUANT_CUDA_PDL");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "1") == 0) return PdlSetting::kOn;
  if (std::strcmp(v, "late") == 0) return PdlSetting::kLate;
  return PdlSetting::kOff;
}

// True when the current device is sm_90 or newer (griddepcontrol exists).
inline bool CurrentDeviceHasPdl() { return CurrentDeviceComputeCapability() >= 90; }

// The mode of one launch: `weights_constant` = every weight-side input (codes, scales, zero
// points) is a constant initializer of the session.
inline PdlMode MakePdlMode(PdlSetting s, bool weights_constant) {
  PdlMode m;
  if (s == PdlSetting::kOff || !CurrentDeviceHasPdl()) return m;
  m.launch = true;
  m.weights_early = s == PdlSetting::kOn && weights_constant;
  return m;
}

#ifdef __CUDACC__
// Waits until the previous grid (if it was PDL-linked to this one) has completed and its memory
// operations are visible to this grid. The "memory" clobber keeps the compiler from hoisting
// loads above it.
__device__ __forceinline__ void PdlWaitPrimary() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void PdlAllowDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// <<<grid, block, smem_bytes, stream>>>(args...) in clusters of cluster_x CTAs along x when
// cluster_x > 1 (sm_90), with the PDL attribute when `pdl`.
template <typename... Params, typename... Args>
cudaError_t LaunchWithPdlCluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                                 unsigned cluster_x, cudaStream_t stream, bool pdl, Args... args) {
  cudaLaunchAttribute attr[2];
  int n_attr = 0;
  if (cluster_x > 1) {
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = cluster_x;
    attr[n_attr].val.clusterDim.y = 1;
    attr[n_attr].val.clusterDim.z = 1;
    ++n_attr;
  }
  if (pdl) {
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr].val.programmaticStreamSerializationAllowed = 1;
    ++n_attr;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
}
// <<<grid, block, smem_bytes, stream>>>(args...), with the PDL attribute when `pdl`.
template <typename... Params, typename... Args>
cudaError_t LaunchWithPdlSmem(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                              bool pdl, Args... args) {
  return LaunchWithPdlCluster(kernel, grid, block, smem_bytes, 1, stream, pdl, args...);
}
// <<<grid, block, 0, stream>>>(args...), with the PDL attribute when `pdl`.
template <typename... Params, typename... Args>
cudaError_t LaunchWithPdl(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, bool pdl,
                          Args... args) {
  return LaunchWithPdlSmem(kernel, grid, block, 0, stream, pdl, args...);
}
#endif

}  // namespace pyquant
