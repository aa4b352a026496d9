// KVCacheWrite on the CPU execution provider (ops/kv_cache_write.h, docs/ops.md).
#include <cstring>
#include <string>
#include <vector>

#include "cpu/parallel.h"
#include "cpu/register_cpu.h"
#include "ops/kv_cache_write.h"

namespace pyquant {

namespace {

class KvCacheWriteCpu final : public Kernel {
 public:
  explicit KvCacheWriteCpu(ONNXTensorElementDataType t) : type_(t) {}

  void Compute(OrtKernelContext* ctx) override {
    const KvCacheWriteProblem p = BindKvCacheWrite(ctx, type_);
    // Every slot in range and none twice (on the CPU the values are at hand; the CUDA kernel
    // cannot report without a host sync and skips a slot out of range instead).
    std::vector<bool> taken(static_cast<size_t>(p.length), false);
    for (int64_t s = 0; s < p.steps; ++s) {
      const int64_t slot = p.slots[s];
      if (slot < 0 || slot >= p.length) {
        throw OpError("cache_position[" + std::to_string(s) + "] = " + std::to_string(slot) + " is outside [0, " +
                      std::to_string(p.length) + ")");
      }
      if (taken[static_cast<size_t>(slot)]) {
        throw OpError("cache_position names slot " + std::to_string(slot) + " twice");
      }
      taken[static_cast<size_t>(slot)] = true;
    }
    const int64_t row_bytes = p.length * p.slot_bytes;
    ParallelFor(ctx, static_cast<size_t>(p.rows), [&](size_t r) {
      uint8_t* dst = p.present + static_cast<int64_t>(r) * row_bytes;
      if (!p.in_place()) std::memcpy(dst, p.past + static_cast<int64_t>(r) * row_bytes, static_cast<size_t>(row_bytes));
      const uint8_t* src = p.fresh + static_cast<int64_t>(r) * p.steps * p.slot_bytes;
      for (int64_t s = 0; s < p.steps; ++s) {
        std::memcpy(dst + p.slots[s] * p.slot_bytes, src + s * p.slot_bytes, static_cast<size_t>(p.slot_bytes));
      }
    });
  }

 private:
  ONNXTensorElementDataType type_;
};

}  // namespace

void AppendKvCacheWriteCpuOps(std::vector<OpDef>& defs) { AppendKvCacheWriteDefs<KvCacheWriteCpu>(defs, nullptr); }

}  // namespace pyquant
