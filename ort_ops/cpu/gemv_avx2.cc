// AVX2 + FMA + F16C instantiation of the small-M kernels (cpu/gemv.h, cpu/gemv_kernels.inc).
// Every header is included before the target pragma, so only the code of this file (internal
// linkage) is compiled for AVX2; the dispatcher calls it only on CPUs that have it.
#include "cpu/gemv.h"

#include "common/dtypes.h"
#include "layout/int4_block.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PYQUANT_GEMV_X86 1
#endif

#if defined(PYQUANT_GEMV_X86)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#endif

namespace pyquant {

#if defined(PYQUANT_GEMV_X86)
namespace {
#define PYQUANT_GEMV_F16C 1
#define PYQUANT_GEMV_MAX_R4 1  // 16 ymm registers: at most 4 rows of X per tile
#include "cpu/gemv_ops_avx2.inc"
#include "cpu/gemv_kernels.inc"
#undef PYQUANT_GEMV_MAX_R4
#undef PYQUANT_GEMV_F16C
}  // namespace

namespace gemv_isa {
void Int4RowsAvx2(const Int4GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  Int4RowsAnyScale<OpsAvx2, 4>(p, n0, n1, y, ldy);
}
void Fp8RowsAvx2(const Fp8GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  Fp8Rows<OpsAvx2, 4>(p, n0, n1, y, ldy);
}
}  // namespace gemv_isa
#else
namespace gemv_isa {
void Int4RowsAvx2(const Int4GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  Int4RowsBase(p, n0, n1, y, ldy);
}
void Fp8RowsAvx2(const Fp8GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  Fp8RowsBase(p, n0, n1, y, ldy);
}
}  // namespace gemv_isa
#endif

}  // namespace pyquant

#if defined(PYQUANT_GEMV_X86)
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
