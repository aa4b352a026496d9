#include "cuda/env_knobs.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace pyquant {

const char* EnvValue(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v ? v : nullptr;
}

int EnvInt(const char* name, int dflt) {
  const char* v = EnvValue(name);
  return v ? static_cast<int>(std::strtol(v, nullptr, 10)) : dflt;
}

int EnvChoice(const char* name, std::initializer_list<const char*> names, int dflt) {
  const char* v = EnvValue(name);
  if (!v) return dflt;
  int i = 0;
  for (const char* n : names) {
    if (std::strcmp(v, n) == 0) return i;
    ++i;
  }
  return (*v >= '0' && *v <= '9') ? static_cast<int>(std::strtol(v, nullptr, 10)) : dflt;
}

StagedSplitLimits CudaStagedSplitLimits() {
  StagedSplitLimits l;
  const int c = EnvInt("PYQUANT_STAGED_MAX_CLUSTER", l.max_cluster);
  if (c == 1 || c == 2 || c == 4 || c == 8 || c == 16) l.max_cluster = c;
  const int z = EnvInt("PYQUANT_STAGED_SPLIT_Z", l.max_kz);
  if (z == 1 || z == 2 || z == 4 || z == 8) l.max_kz = z;
  return l;
}

sm90::Sm90SchedulerTuning ReadSm90SchedulerTuning(const char* prefix, bool* decomposition_auto) {
  const std::string p(prefix);
  sm90::Sm90SchedulerTuning t;
  // Index 0 "auto", 1..3 as Sm90SchedulerTuning::decomposition, 4 "heuristic" (= 0).
  const int d = EnvChoice((p + "_DECOMP").c_str(), {"auto", "streamk", "splitk", "dp", "heuristic"}, 0);
  *decomposition_auto = d == 0;
  t.decomposition = (d >= 1 && d <= 3) ? d : 0;
  t.splits = EnvInt((p + "_SPLITS").c_str(), 0);
  t.raster = EnvChoice((p + "_RASTER").c_str(), {"auto", "m", "n"}, 0);
  t.swizzle = EnvInt((p + "_SWIZZLE").c_str(), 0);
  t.nondeterministic = EnvChoice((p + "_REDUCE").c_str(), {"det", "nondet"}, 0);
  return t;
}

}  // namespace pyquant
