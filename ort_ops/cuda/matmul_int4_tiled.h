// The tiled mma kernel of MatMulInt4 (matmul_int4_tiled_impl.cu): the portable prefill kernel
// (M >= tiled_min_m on GPUs without the Hopper GEMM, and where that GEMM does not apply), 64 x 128 CTA
// tiles with X through shared memory and a split-K over grid.z when M x N gives too few CTAs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/matmul_int4_impl.cuh"
#include "ops/matmul_int4.h"

namespace pyquant {

// Tokens per CTA (grid.y = ceil(M / kInt4TiledRows) must stay <= 65535).
constexpr int64_t kInt4TiledRows = 64;

// Device scratch LaunchInt4Tiled can use for its split-K sums (M x N floats), 0 when it does not split.
size_t Int4TiledWorkspaceBytes(const MatMulInt4Problem& p);

// p.x, p.b, p.scales, p.zero_points, p.bias, p.y device pointers (T = __half / __nv_bfloat16), g =
// MakeInt4Geom(p.m, p.attrs). Splits K when ws holds Int4TiledWorkspaceBytes(p) (zeroed here with a
// memset on `stream`; the split's fp32 sums are added with atomics, so not bit-reproducible), else
// one CTA per output tile. Returns the launch status.
template <typename T>
cudaError_t LaunchInt4Tiled(const MatMulInt4Problem& p, const cuda_detail::Int4Geom& g, void* ws, size_t ws_bytes,
                            cudaStream_t stream);

}  // namespace pyquant
