// The CPU execution provider's registration table.
#pragma once

#include <vector>

#include "common/custom_op.h"

namespace pyquant {

void AppendMatMulInt4CpuOps(std::vector<OpDef>& defs);
void AppendLinearFp8CpuOps(std::vector<OpDef>& defs);
void AppendKvCacheWriteCpuOps(std::vector<OpDef>& defs);

inline std::vector<OpDef> CpuOpTable() {
  std::vector<OpDef> defs;
  AppendMatMulInt4CpuOps(defs);
  AppendLinearFp8CpuOps(defs);
  AppendKvCacheWriteCpuOps(defs);
  return defs;
}

}  // namespace pyquant
