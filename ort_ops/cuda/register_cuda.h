// The CUDA execution provider's registration table.
#pragma once

#include <vector>

#include "common/custom_op.h"

namespace pyquant {

constexpr const char* kCudaExecutionProvider = "CUDAExecutionProvider";

void AppendMatMulInt4CudaOps(std::vector<OpDef>& defs);
void AppendLinearFp8CudaOps(std::vector<OpDef>& defs);
void AppendKvCacheWriteCudaOps(std::vector<OpDef>& defs);

inline std::vector<OpDef> CudaOpTable() {
  std::vector<OpDef> defs;
  AppendMatMulInt4CudaOps(defs);
  AppendLinearFp8CudaOps(defs);
  AppendKvCacheWriteCudaOps(defs);
  return defs;
}

}  // namespace pyquant
