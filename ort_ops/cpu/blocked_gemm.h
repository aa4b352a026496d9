// Y[M, N] = A[M, K] · W[N, K]^T for weights that must be decoded on the fly (INT4 codes, FP8).
//
// Work is split into tasks of (kRowsPerTask rows of A) x (kNr = 16 output columns). A task walks
// K in chunks of kKc: it decodes its 16 weight rows for the chunk into a transposed float panel
// bt[kKc][16] (decode once, reuse for every row of A), then a register-blocked micro-kernel
// accumulates 4 rows x 16 columns at a time. The float sums stay in a task-local tile until the
// epilogue, which applies the per-row scale and bias and rounds once to T.
#pragma once

#include <cstdint>
#include <vector>

namespace pyquant {

constexpr int kNr = 16;             // output columns per panel (one AVX-512 or two AVX2 vectors)
constexpr int kMr = 4;              // rows of A per micro-kernel call
constexpr int64_t kKc = 256;        // K chunk; a multiple of every INT4 block size
constexpr int64_t kRowsPerTask = 256;

// acc[kMr x kNr] (row stride kNr) += a[rows x kc] (row stride lda) * bt[kc x kNr].
// rows <= kMr. Compiled for several ISAs, picked at load time.
void MicroKernel(const float* a, int64_t lda, int rows, const float* bt, int64_t kc, float* acc);

}  // namespace pyquant

#include <algorithm>

#include "cpu/parallel.h"

namespace pyquant {

// decode(n0, cols, k0, kc, bt): fill bt[kc][kNr] with the float weights W[n0 + j, k0 + kk]
//   (j < cols; columns cols..kNr-1 must be zero).
// epilogue(row, n0, cols, acc): acc[j] = sum_k a[row, k] * W[n0 + j, k] for j < cols.
template <typename Decode, typename Epilogue>
void DecodeGemm(OrtKernelContext* ctx, const float* a, int64_t m, int64_t k, int64_t n, const Decode& decode,
                const Epilogue& epilogue) {
  const int64_t n_panels = (n + kNr - 1) / kNr;
  const int64_t m_tasks = std::max<int64_t>(1, (m + kRowsPerTask - 1) / kRowsPerTask);
  ParallelFor(ctx, static_cast<size_t>(n_panels * m_tasks), [&](size_t task) {
    const int64_t panel = static_cast<int64_t>(task) % n_panels;
    const int64_t mt = static_cast<int64_t>(task) / n_panels;
    const int64_t n0 = panel * kNr;
    const int cols = static_cast<int>(std::min<int64_t>(kNr, n - n0));
    const int64_t m0 = mt * kRowsPerTask;
    const int64_t rows = std::min<int64_t>(kRowsPerTask, m - m0);
    if (rows <= 0) return;
    thread_local std::vector<float> bt_buf, acc_buf;
    bt_buf.resize(static_cast<size_t>(kKc * kNr));
    acc_buf.assign(static_cast<size_t>(rows * kNr), 0.0f);
    float* bt = bt_buf.data();
    float* acc = acc_buf.data();
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      const int64_t kc = std::min<int64_t>(kKc, k - k0);
      decode(n0, cols, k0, kc, bt);
      for (int64_t r = 0; r < rows; r += kMr) {
        const int rr = static_cast<int>(std::min<int64_t>(kMr, rows - r));
        MicroKernel(a + (m0 + r) * k + k0, k, rr, bt, kc, acc + r * kNr);
      }
    }
    for (int64_t r = 0; r < rows; ++r) epilogue(m0 + r, n0, cols, acc + r * kNr);
  });
}

}  // namespace pyquant
