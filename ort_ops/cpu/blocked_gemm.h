// Y[M, N] = A[M, K] · W[N, K]^T for weights that must be decoded on the fly (INT4 codes, FP8).
//
// Work is split into tasks of (kRowsPerTask rows of A) x (a group of panels of kNr = 16 output
// columns). A task walks K in chunks of kKc: it decodes each panel's 16 weight rows for the chunk
// into a transposed float panel bt[kKc][16] (decode once, reuse for every row of A), then a
// register-blocked micro-kernel runs the task's rows over it, a register tile at a time. The float sums stay in a task-local tile until the
// epilogue, which applies the per-row scale and bias and rounds once to T.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace pyquant {

// The instruction set the CPU kernels run with, picked once from the CPU's *features*;
// PYQUANT_CPU_ISA=avx2|base caps it (lets tests cover the other paths on an AVX-512 machine).
enum class CpuIsaLevel { kBase, kAvx2, kAvx512 };
CpuIsaLevel CpuIsa();

constexpr int kNr = 16;       // output columns per panel (one AVX-512 or two AVX2 vectors)
constexpr int64_t kKc = 256;  // K chunk; a multiple of every INT4 block size
constexpr int64_t kRowsPerTask = 256;

// acc[rows x kNr] (row stride kNr) += a[rows x kc] (row stride lda) * bt[kc x kNr], any rows >= 0:
// the kernel walks them in register tiles of its ISA's height. add = false: acc = the product (acc
// is only written, so a task's sums need no zero fill before its first K chunk). Compiled for
// several ISAs, picked once at load time from the CPU's features.
void MicroKernel(const float* a, int64_t lda, int rows, const float* bt, int64_t kc, float* acc, bool add);

// Two panels at once: acc0 += a * bt0 and acc1 += a * bt1 (each acc as in MicroKernel). On AVX-512
// a 8 x 32 register tile; elsewhere two MicroKernel passes.
void MicroKernel2(const float* a, int64_t lda, int rows, const float* bt0, const float* bt1, int64_t kc, float* acc0,
                  float* acc1, bool add);

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

// LinearFp8's activation quantization of one row, in place (the bit-exact rule of docs/ops.md):
// row[i] = Fp8E4M3RoundSat(row[i] / s_x) * mul, with s_x from the row's max |x| (NaN ignored) when
// dynamic, else the given static scale (inv = 1 / s_x). Returns s_x. Same ISA dispatch as the
// kernels: its loops want 8- or 16-wide integer compares (3 passes over X took 13 % of LinearFp8
// at M = 1024, K = 1536 in the baseline build).
float QuantizeFp8Row(float* row, int64_t k, bool dynamic, float inv, float s_x, float mul);

}  // namespace pyquant

#include "cpu/parallel.h"

namespace pyquant {

// How DecodeGemm splits Y into tasks: a task is (up to kRowsPerTask rows) x (a group of `group`
// panels of kNr columns). Grouping panels lets every panel of the group reuse the A chunk (rows x kKc
// floats, <= 256 KiB) from L2 instead of re-reading it from L3 per panel (that traffic, M*K*4*N/16
// bytes, dominated large-K shapes). Groups shrink when there would be too few tasks to share out;
// even sizes where possible, since panels run in pairs (MicroKernel2).
struct GemmTasks {
  int64_t n_panels, m_tasks, group, n_groups;
  size_t count() const { return static_cast<size_t>(n_groups * m_tasks); }
};
inline GemmTasks PlanGemmTasks(int64_t m, int64_t n) {
  GemmTasks t;
  t.n_panels = (n + kNr - 1) / kNr;
  t.m_tasks = std::max<int64_t>(1, (m + kRowsPerTask - 1) / kRowsPerTask);
  t.group = std::clamp<int64_t>(t.n_panels * t.m_tasks / 16, t.n_panels >= 8 ? 2 : 1, 8);
  t.group += t.group & 1 & static_cast<int64_t>(t.group < 8);
  t.n_groups = (t.n_panels + t.group - 1) / t.group;
  return t;
}

// What task `task` of PlanGemmTasks(m, n) covers: panels p0 .. p0 + np - 1, rows m0 .. m0 + rows - 1
// (rows <= 0: nothing). Shared by RunGemmTask and cpu/fp8_bf16_gemm.h's RunFp8Bf16Task.
struct GemmTaskSpan {
  int64_t p0, np, m0, rows;
};
inline GemmTaskSpan TaskSpan(const GemmTasks& t, size_t task, int64_t m) {
  GemmTaskSpan s;
  s.p0 = static_cast<int64_t>(task) % t.n_groups * t.group;
  s.np = std::min(t.group, t.n_panels - s.p0);
  s.m0 = static_cast<int64_t>(task) / t.n_groups * kRowsPerTask;
  s.rows = std::min<int64_t>(kRowsPerTask, m - s.m0);
  return s;
}

// The task's epilogue from its sums acc_buf [np][rows][kNr], row by row, so that each row of Y gets
// its group's np * 64 bytes in one run (panel by panel, every store started a new cache line: ~10 %
// of the single-thread time at K = 384).
template <typename Epilogue>
void TaskEpilogue(const GemmTaskSpan& s, int64_t n, const float* acc_buf, const Epilogue& epilogue) {
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t pi = 0; pi < s.np; ++pi) {
      const int64_t n0 = (s.p0 + pi) * kNr;
      epilogue(s.m0 + r, n0, static_cast<int>(std::min<int64_t>(kNr, n - n0)), acc_buf + (pi * s.rows + r) * kNr);
    }
  }
}

// decode(n0, cols, k0, kc, bt): fill bt[kc][kNr] with the float weights W[n0 + j, k0 + kk]
//   (j < cols; columns cols..kNr-1 must be zero).
// epilogue(row, n0, cols, acc): acc[j] = sum_k a[row, k] * W[n0 + j, k] for j < cols.
// One task of PlanGemmTasks(m, n); tasks write disjoint parts of Y.
template <typename Decode, typename Epilogue>
void RunGemmTask(const GemmTasks& t, size_t task, const float* a, int64_t m, int64_t k, int64_t n, const Decode& decode,
                 const Epilogue& epilogue) {
  const GemmTaskSpan s = TaskSpan(t, task, m);
  const int64_t p0 = s.p0, np = s.np, m0 = s.m0, rows = s.rows;
  if (rows <= 0) return;
  thread_local std::vector<float> bt_buf, acc_buf;
  bt_buf.resize(static_cast<size_t>(2 * kKc * kNr));
  acc_buf.resize(static_cast<size_t>(np * rows * kNr));  // written whole by the first K chunk
  float* bt = bt_buf.data();
  for (int64_t k0 = 0; k0 < k; k0 += kKc) {
    const int64_t kc = std::min<int64_t>(kKc, k - k0);
    // Panels in pairs (MicroKernel2); an odd last one alone. The micro-kernels take all the task's
    // rows and walk them in register tiles of their own height.
    for (int64_t pi = 0; pi < np; pi += 2) {
      const bool pair = pi + 1 < np;
      for (int64_t q = 0; q < (pair ? 2 : 1); ++q) {
        const int64_t n0 = (p0 + pi + q) * kNr;
        decode(n0, static_cast<int>(std::min<int64_t>(kNr, n - n0)), k0, kc, bt + q * kKc * kNr);
      }
      float* acc = acc_buf.data() + pi * rows * kNr;
      const float* a_chunk = a + m0 * k + k0;
      if (pair) {
        MicroKernel2(a_chunk, k, rows, bt, bt + kKc * kNr, kc, acc, acc + rows * kNr, k0 > 0);
      } else {
        MicroKernel(a_chunk, k, rows, bt, kc, acc, k0 > 0);
      }
    }
  }
  TaskEpilogue(s, n, acc_buf.data(), epilogue);
}

template <typename Decode, typename Epilogue>
void DecodeGemm(OrtKernelContext* ctx, const float* a, int64_t m, int64_t k, int64_t n, const Decode& decode,
                const Epilogue& epilogue) {
  const GemmTasks t = PlanGemmTasks(m, n);
  ParallelFor(ctx, t.count(), [&](size_t task) { RunGemmTask(t, task, a, m, k, n, decode, epilogue); });
}

}  // namespace pyquant
