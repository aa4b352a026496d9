#include "cpu/blocked_gemm.h"

namespace pyquant {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PYQUANT_MULTIVERSION __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
#else
#define PYQUANT_MULTIVERSION
#endif

template <int R>
__attribute__((always_inline)) static inline void MicroKernelRows(const float* __restrict a, int64_t lda, const float* __restrict bt, int64_t kc,
                                   float* __restrict acc) {
  float c[R][kNr];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < kNr; ++j) c[r][j] = acc[r * kNr + j];
  for (int64_t k = 0; k < kc; ++k) {
    const float* b = bt + k * kNr;
    for (int r = 0; r < R; ++r) {
      const float av = a[r * lda + k];
      for (int j = 0; j < kNr; ++j) c[r][j] += av * b[j];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < kNr; ++j) acc[r * kNr + j] = c[r][j];
}

PYQUANT_MULTIVERSION
void MicroKernel(const float* a, int64_t lda, int rows, const float* bt, int64_t kc, float* acc) {
  switch (rows) {
    case 4: MicroKernelRows<4>(a, lda, bt, kc, acc); break;
    case 3: MicroKernelRows<3>(a, lda, bt, kc, acc); break;
    case 2: MicroKernelRows<2>(a, lda, bt, kc, acc); break;
    default: MicroKernelRows<1>(a, lda, bt, kc, acc); break;
  }
}

}  // namespace pyquant
