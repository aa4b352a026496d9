// KVCacheWrite CUDA launcher: problem (pointers, sizes) + stream -> status. Validation and shapes
// live in ops/kv_cache_write.h; the ORT op struct is kv_cache_write_op.cc; the kernel is
// kv_cache_write_impl.cu.
#pragma once

#include <cuda_runtime.h>

#include "ops/kv_cache_write.h"

namespace pyquant {

// p.past, p.fresh, p.slots, p.present: device pointers. When p.present != p.past, past is copied
// to present first (cudaMemcpyAsync, rows * length * slot_bytes bytes); then one CTA per (row,
// entry) copies the entry's slot_bytes into slot p.slots[entry] of its row. A slot outside
// [0, length) is not written (the kernel cannot report it without a host sync, which a CUDA graph
// forbids; the CPU op raises). Two entries naming one slot race (the CPU op raises).
// Capturable in a CUDA graph (no host sync, no allocation).
// Grid: x = entries per row (up to 2^31 - 1: a prompt step's tokens), y = rows = batch * heads, at
// most kKvCacheWriteMaxRows (the op struct checks it).
constexpr int64_t kKvCacheWriteMaxRows = 65535;
cudaError_t LaunchKvCacheWrite(const KvCacheWriteProblem& p, cudaStream_t stream);

}  // namespace pyquant
