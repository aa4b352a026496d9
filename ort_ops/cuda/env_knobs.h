// Environment switches of the CUDA ops (benchmarks and tests set them around session creation;
// the ops read them once per kernel creation). Unset or empty = the production default.
#pragma once

#include <initializer_list>

#include "cuda/sm90/launch_control.h"
#include "cuda/staged_split.h"

namespace pyquant {

// The value of `name`, or nullptr when unset or empty.
const char* EnvValue(const char* name);
// The value of `name` as an integer, else dflt.
int EnvInt(const char* name, int dflt);
// Index of the value of `name` in `names` (also accepted: the index as a number), else dflt.
int EnvChoice(const char* name, std::initializer_list<const char*> names, int dflt);
// The staged kernels' K split caps (both ops; staged_split.h):
//   PYQUANT_STAGED_MAX_CLUSTER: the largest cluster (StagedClusterSplit), 1 / 2 / 4 / 8 / 16, else 8;
//   PYQUANT_STAGED_SPLIT_Z: the largest grid split (StagedGridSplitFor), 1 (none) / 2 / 4 / 8, else
//   the default StagedSplitLimits::max_kz.
StagedSplitLimits CudaStagedSplitLimits();

// The Hopper GEMM scheduler knobs under one prefix (e.g. "PYQUANT_INT4_SM90"):
//   <prefix>_DECOMP   auto | streamk | splitk | dp | heuristic   (Sm90SchedulerTuning::decomposition
//                     1 / 2 / 3 / 0; "auto" or unset: *decomposition_auto = true, the op decides
//                     per call and tuning.decomposition stays 0)
//   <prefix>_SPLITS   split-K factor
//   <prefix>_RASTER   auto | m | n
//   <prefix>_SWIZZLE  1 | 2 | 4 | 8
//   <prefix>_REDUCE   det | nondet
sm90::Sm90SchedulerTuning ReadSm90SchedulerTuning(const char* prefix, bool* decomposition_auto);

}  // namespace pyquant
