// Per-device facts the CUDA launchers ask on every call, queried once per device and cached.
// Plain CUDA runtime only (no ORT or CUTLASS headers), so the sm_90a object library can use it.
#pragma once

#include <cuda_runtime.h>

#include <mutex>

namespace pyquant {

// Multiprocessor count of `device` (0 for an ordinal outside 0..63).
inline int CudaSmCount(int device) {
  static std::mutex mu;
  static int cached[64] = {};
  if (device < 0 || device >= 64) return 0;
  std::lock_guard<std::mutex> lock(mu);
  if (cached[device] == 0) cudaDeviceGetAttribute(&cached[device], cudaDevAttrMultiProcessorCount, device);
  return cached[device];
}

// SM count of the current device (cached as above), 0 when there is no usable current device.
inline int CurrentDeviceSmCount() {
  int dev = 0;
  return cudaGetDevice(&dev) == cudaSuccess ? CudaSmCount(dev) : 0;
}

// Compute capability of the current device as 10 * major + minor (90 for sm_90), queried once
// per device; 0 when there is no usable current device. *device_out (if given) receives the
// current device ordinal.
inline int CurrentDeviceComputeCapability(int* device_out = nullptr) {
  static std::mutex mu;
  static int cached[64] = {};  // 0 unknown
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  if (device_out != nullptr) *device_out = dev;
  std::lock_guard<std::mutex> lock(mu);
  if (cached[dev] == 0) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cached[dev] = 10 * major + minor;
  }
  return cached[dev];
}

// True when the current device is compute capability 9.0 (the sm_90a code runs there only);
// *device_out (if given) receives the current device ordinal.
inline bool CurrentDeviceIsSm90(int* device_out = nullptr) { return CurrentDeviceComputeCapability(device_out) == 90; }

}  // namespace pyquant
