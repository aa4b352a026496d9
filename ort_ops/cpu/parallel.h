// Runs work on ORT's intra-op thread pool (KernelContext_ParallelFor), so our ops respect the
// session's intra_op_num_threads and never start threads of their own.
#pragma once

#include <cstddef>

#include "common/ort_api.h"

namespace pyquant {

template <typename Fn>
void ParallelFor(OrtKernelContext* ctx, size_t total, Fn&& fn) {
  if (total == 0) return;
  if (total == 1) {
    fn(size_t{0});
    return;
  }
  auto trampoline = [](void* data, size_t i) { (*static_cast<Fn*>(data))(i); };
  ThrowOnError(Api().KernelContext_ParallelFor(ctx, trampoline, total, 0, &fn));
}

}  // namespace pyquant
