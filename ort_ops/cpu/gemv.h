// Direct small-M kernels ("GEMV" path): Y[m, n] for a few rows of X, reading every weight byte
// exactly once and decoding it in registers.
//
// Why: the blocked GEMM (cpu/blocked_gemm.h) decodes 16 weight rows into a float panel in memory
// and reads it back; at M = 1 that store + reload costs more than the multiply itself and made
// MatMulInt4 4-6x slower than ORT's MatMulNBits. Here each task owns a range of output rows n and
// walks K block by block: 16 bytes of B -> 32 int4 codes (or 16 bytes of W -> 16 fp8 values) are
// widened in registers, (q - zp) is formed exactly in float, multiplied with X and summed per
// block in fp32, and the block sum is multiplied by the block's scale:
//   sum_b s[n, b] * sum_{k in b} x[m, k] * (q[n, k] - zp[n, b])        (docs/ops.md numerics)
// (The (q - zp) form, not sum(x q) - zp sum(x): it keeps all-zero blocks exactly zero and the error
// bounded by sum |x w|, which the cancellation of the other form would not.)
//
// The caller splits X once per call into the order the weights come in (int4: even / odd k, so
// the low / high nibbles of consecutive bytes line up with consecutive floats), zero padded to the
// padded K, and does the epilogue (bias, per-row / per-channel scales, rounding to T).
//
// Three implementations, picked once from the CPU's features (CpuIsa(), PYQUANT_CPU_ISA caps it):
// cpu/gemv_avx512.cc, cpu/gemv_avx2.cc (intrinsics) and cpu/gemv_base.cc (portable C++).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "cpu/parallel.h"

namespace pyquant {

// Element type of the int4 scales (T of the op), read directly by the kernels.
enum class ScaleType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

struct Int4GemvParams {
  // X split by k parity: xe[m * x_stride + j] = x[m, 2j], xo[m * x_stride + j] = x[m, 2j + 1],
  // j < n_blocks * block_size / 2; zero where 2j (+1) >= K, so padding codes contribute exact 0.
  const float* xe = nullptr;
  const float* xo = nullptr;
  int64_t x_stride = 0;          // floats between rows of xe / xo (>= n_blocks * block_size / 2)
  int64_t m = 0;                 // rows of X (processed in groups of a few rows that share each decode)
  const uint8_t* b = nullptr;    // uint8 [N, n_blocks, block_size / 2], layout/int4_block.h
  const void* scales = nullptr;  // scale_type [N, n_blocks]
  ScaleType scale_type = ScaleType::kFloat32;
  const uint8_t* zp = nullptr;  // uint8 [N, ceil(n_blocks / 2)] 4-bit zero points, or null (= 8)
  int64_t n_blocks = 0;
  int64_t block_size = 0;  // power of two, 16..256
};

// y[mi * ldy + (n - n0)] = sum_k x[mi, k] * W[n, k] for n in [n0, n1), mi < p.m (no bias).
// y: float [p.m, ldy], ldy >= n1 - n0; overwritten.
void Int4GemvRows(const Int4GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy);

struct Fp8GemvParams {
  // Quantized activations times 256: xs[m * x_stride + k] = 256 * xq[m, k] (exact: xq is an e4m3
  // value), zero for K <= k < x_stride. The kernels decode a weight code to w / 256 (the e4m3 ->
  // fp16 bit trick, see gemv_avx512.cc), so each product xs * (w / 256) equals xq * w exactly.
  const float* xs = nullptr;
  int64_t x_stride = 0;  // >= K rounded up to 16
  int64_t m = 0;
  int64_t k = 0;
  const uint8_t* w = nullptr;      // e4m3fn [N, K]
  const float* w_scale = nullptr;  // float [N, n_scale_blocks] when block_size > 0 (else unused)
  int64_t block_size = 0;          // 0: per channel (the caller scales), else a power of two >= 16
  int64_t n_scale_blocks = 1;
};

// y[mi * ldy + (n - n0)] = sum_b w_scale[n, b] * sum_{k in b} xq[mi, k] * w[n, k] (block_size > 0)
// or sum_k xq[mi, k] * w[n, k] (block_size == 0), for n in [n0, n1). A NaN weight code makes its
// output column NaN, as in the reference. y: float [p.m, ldy]; overwritten.
void Fp8GemvRows(const Fp8GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy);

// Rows of B / W per parallel task: enough tasks to balance the threads, large enough that the
// ~1 us per-task overhead stays small. Multiple of 4 (the kernels' row tile).
inline int64_t GemvRowsPerTask(int64_t n, int64_t row_bytes) {
  int64_t r = (n + 31) / 32;  // >= 32 tasks when N allows it
  const int64_t min_rows = row_bytes >= 1024 ? 4 : 16;
  if (r < min_rows) r = min_rows;
  if (r > 128) r = 128;
  return (r + 3) / 4 * 4;
}

// Runs the small-M path over tasks of GemvRowsPerTask output columns (rows of B / W):
//   rows(n0, n1, acc, ld_acc) fills acc[mi * ld_acc + (j - n0)] (mi < m, n0 <= j < n1) with the
//   float sums of output column j for row mi of X; store(mi, j, sum) then writes Y[mi, j].
// Shared by MatMulInt4 and LinearFp8 so that both split and reduce work the same way.
// align: the tasks' first rows are multiples of it (a power of two >= 4; the packed int8 kernel's
// 16-row panels).
template <typename Rows, typename Store>
void RunGemvTasks(OrtKernelContext* ctx, int64_t m, int64_t n, int64_t row_bytes, const Rows& rows, const Store& store,
                  int64_t align = 4) {
  const int64_t rows_per_task = (GemvRowsPerTask(n, row_bytes) + align - 1) / align * align;
  const int64_t tasks = (n + rows_per_task - 1) / rows_per_task;
  ParallelFor(ctx, static_cast<size_t>(tasks), [&](size_t t) {
    const int64_t n0 = static_cast<int64_t>(t) * rows_per_task;
    const int64_t n1 = std::min(n, n0 + rows_per_task);
    thread_local std::vector<float> acc;  // [m, rows_per_task] float sums of this task
    acc.resize(static_cast<size_t>(m * rows_per_task));
    rows(n0, n1, acc.data(), rows_per_task);
    for (int64_t mi = 0; mi < m; ++mi) {
      const float* a = acc.data() + mi * rows_per_task;
      for (int64_t j = n0; j < n1; ++j) store(mi, j, a[j - n0]);
    }
  });
}

// Largest M that takes the small-M path, per op (measured on the 2-core AVX-512 bench machine,
// single-thread CPU time, normalized by MatMulNBits in the same run because the machine is shared):
// INT4: 8. At M = 16 the direct path (two groups of 8 rows, each re-decoding the weights) was on
//   average ~15% behind the blocked GEMM, whose decode is amortized over all rows; at M <= 8 it is
//   2-5x ahead.
// FP8: 16. Its blocked-path decode (a table gather per byte, 16 rows at a time) is dearer, and
//   the direct path was 1.2-1.5x ahead at M = 16.
// PYQUANT_CPU_GEMV_MAX_M overrides both (tuning, and tests that push large M through this path).
inline int64_t GemvMaxM(int64_t default_max) {
  static const int64_t env = [] {
    const char* e = std::getenv("PYQUANT_CPU_GEMV_MAX_M");
    return e && *e ? static_cast<int64_t>(std::atoll(e)) : int64_t{-1};
  }();
  return env >= 0 ? env : default_max;
}
constexpr int64_t kInt4GemvMaxM = 8;
constexpr int64_t kFp8GemvMaxM = 16;
// FP8 where the AVX512-BF16 GEMM takes the layer (cpu/fp8_bf16_gemm.h: per-channel scales,
// quantized activations): 8. Session 45, single-thread CPU time, small-M path against that GEMM
// (PYQUANT_CPU_GEMV_MAX_M=0), ms: 384 x 1536 (K x N) at M = 4 / 8 / 12 / 16 0.061 / 0.106 / 0.163 /
// 0.208 against 0.070 / 0.083 / 0.095 / 0.104; 4096 x 4096 1.45 / 1.67 / 4.16 / 5.39 against
// 2.26 / 2.26 / 2.68 / 2.85 (at M = 8 the two shapes disagree; M <= 6 the small-M path wins).
constexpr int64_t kFp8Bf16GemvMaxM = 8;

namespace gemv_isa {
// Per-ISA entry points (same contracts as above).
void Int4RowsBase(const Int4GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy);
void Fp8RowsBase(const Fp8GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy);
void Int4RowsAvx2(const Int4GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy);
void Fp8RowsAvx2(const Fp8GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy);
void Int4RowsAvx512(const Int4GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy);
void Fp8RowsAvx512(const Fp8GemvParams& p, int64_t n0, int64_t n1, float* y, int64_t ldy);
}  // namespace gemv_isa

}  // namespace pyquant
