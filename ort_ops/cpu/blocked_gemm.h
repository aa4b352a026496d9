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

// The instruction set the CPU kernels run with, picked once from the CPU's *features*;
// PYQUANT_CPU_ISA=avx2|base caps it (lets tests cover the other paths on an AVX-512 machine).
enum class CpuIsaLevel { kBase, kAvx2, kAvx512 };
CpuIsaLevel CpuIsa();

constexpr int kNr = 16;       // output columns per panel (one AVX-512 or two AVX2 vectors)
constexpr int kMr = 8;        // rows of A per micro-kernel call (AVX-512: 8 independent FMA chains)
constexpr int64_t kKc = 256;  // K chunk; a multiple of every INT4 block size
constexpr int64_t kRowsPerTask = 256;

// acc[kMr x kNr] (row stride kNr) += a[rows x kc] (row stride lda) * bt[kc x kNr].
// rows <= kMr. Compiled for several ISAs, picked once at load time from the CPU's features.
void MicroKernel(const float* a, int64_t lda, int rows, const float* bt, int64_t kc, float* acc);

// Two panels at once: acc0 += a * bt0 and acc1 += a * bt1 (each acc as in MicroKernel). On AVX-512
// a 8 x 32 register tile; elsewhere two MicroKernel passes.
void MicroKernel2(const float* a, int64_t lda, int rows, const float* bt0, const float* bt1, int64_t kc, float* acc0,
                  float* acc1);

// Panel decoders (same ISA dispatch). Column j of the panel reads rows[j]; columns beyond the real
// N point at a zero row and get scale 0, so the decoders need no column bounds.
//
// INT4: bt[i][j] = (q_j[i] - zp[blk][j]) * scale[blk][j], blk = i / block_size, where q_j are
// the packed codes starting at rows[j] (k0 / 2 bytes into the row, k0 a multiple of block_size).
// kc need not be even: the odd tail decodes one padding code into row kc, which is < kKc then.
void DecodeInt4Panel(const uint8_t* const* rows, const float* scale, const float* zp, int64_t block_size, int64_t kc,
                     float* bt);
// FP8: bt[i][j] = table[w_j[i]] * scale[i / scale_block][j]; scale_block >= kc means one scale row.
void DecodeFp8Panel(const uint8_t* const* rows, const float* table, const float* scale, int64_t scale_block, int64_t kc,
                    float* bt);

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
  // A task covers a group of panels, so the A chunk (rows x kKc floats, <= 256 KiB) is reused from L2
  // by every panel of the group instead of being re-read from L3 per panel (that traffic, M*K*4*N/16
  // bytes, dominated large-K shapes). Groups shrink when there would be too few tasks to share out.
  // Even group sizes where possible: panels run in pairs (MicroKernel2).
  int64_t group = std::clamp<int64_t>(n_panels * m_tasks / 16, n_panels >= 8 ? 2 : 1, 8);
  group += group & 1 & static_cast<int64_t>(group < 8);
  const int64_t n_groups = (n_panels + group - 1) / group;
  ParallelFor(ctx, static_cast<size_t>(n_groups * m_tasks), [&](size_t task) {
    const int64_t g = static_cast<int64_t>(task) % n_groups;
    const int64_t mt = static_cast<int64_t>(task) / n_groups;
    const int64_t p0 = g * group;
    const int64_t np = std::min(group, n_panels - p0);
    const int64_t m0 = mt * kRowsPerTask;
    const int64_t rows = std::min<int64_t>(kRowsPerTask, m - m0);
    if (rows <= 0) return;
    thread_local std::vector<float> bt_buf, acc_buf;
    bt_buf.resize(static_cast<size_t>(2 * kKc * kNr));
    acc_buf.assign(static_cast<size_t>(np * rows * kNr), 0.0f);
    float* bt = bt_buf.data();
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      const int64_t kc = std::min<int64_t>(kKc, k - k0);
      // Panels in pairs (MicroKernel2's 32-column tile); an odd last one alone.
      for (int64_t pi = 0; pi < np; pi += 2) {
        const bool pair = pi + 1 < np;
        for (int64_t q = 0; q < (pair ? 2 : 1); ++q) {
          const int64_t n0 = (p0 + pi + q) * kNr;
          decode(n0, static_cast<int>(std::min<int64_t>(kNr, n - n0)), k0, kc, bt + q * kKc * kNr);
        }
        float* acc = acc_buf.data() + pi * rows * kNr;
        for (int64_t r = 0; r < rows; r += kMr) {
          const int rr = static_cast<int>(std::min<int64_t>(kMr, rows - r));
          if (pair) {
            MicroKernel2(a + (m0 + r) * k + k0, k, rr, bt, bt + kKc * kNr, kc, acc + r * kNr,
                         acc + rows * kNr + r * kNr);
          } else {
            MicroKernel(a + (m0 + r) * k + k0, k, rr, bt, kc, acc + r * kNr);
          }
        }
      }
    }
    for (int64_t pi = 0; pi < np; ++pi) {
      const int64_t n0 = (p0 + pi) * kNr;
      const int cols = static_cast<int>(std::min<int64_t>(kNr, n - n0));
      const float* acc = acc_buf.data() + pi * rows * kNr;
      for (int64_t r = 0; r < rows; ++r) epilogue(m0 + r, n0, cols, acc + r * kNr);
    }
  });
}

}  // namespace pyquant
