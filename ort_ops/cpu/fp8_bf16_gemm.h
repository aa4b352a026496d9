// LinearFp8 on the CPU at large M with AVX512-BF16 dot products (vdpbf16ps): Y = A · W^T for
// e4m3 weights W [N, K] with per-channel scales and quantized activations A.
//
// Why: the float path (cpu/blocked_gemm.h) decodes the e4m3 weights to fp32 and runs fp32 FMAs, so
// at large M it is no faster than MLAS's SGEMM on the float model, and it pays the activation
// quantization on top (the README main job, MiniLM at M = 2048 tokens on the CPU EP: FP8 77.8-78.0
// ms against float 68.2-73.3, session 44). But the quantized activations and the raw weights are
// e4m3 values, and bf16 (8 exponent bits, 7 mantissa bits) holds every e4m3 value exactly;
// vdpbf16ps multiplies bf16 pairs exactly (4 x 4 significand bits fit fp32's 24) and adds them in
// fp32. So these are the float path's products, summed in fp32 in another order (within
// docs/ops.md's limit like any summation order), at twice the multiply-adds per instruction and
// half the bytes per operand.
//
// Layouts (bf16 as its 16 bits):
//   A:  [m][lda] bf16, lda even >= K, zeros past K. Pair i of a row (k = 2i, 2i + 1) is one 32-bit
//       word, which the kernel broadcasts to all 16 lanes.
//   bt: one panel of kNr = 16 output columns over a K chunk (k0 .. k0 + kc - 1, k0 even):
//       [ceil(kc / 2)][16] 32-bit words; word (i, j):
//
//         bit 31           16 15            0
//            +---------------+---------------+
//            | W[n0+j][k+1]  | W[n0+j][k]    |   k = k0 + 2i; W[n0+j][k+1] = 0 past K
//            +---------------+---------------+
//
//       so lane j of vdpbf16ps adds A[r][k] * W[n0+j][k] + A[r][k+1] * W[n0+j][k+1].
//   acc: [rows][16] fp32 per panel, as cpu/blocked_gemm.h's.
// The codes go into bt raw; the per-channel scale, the row scale and the bias apply in the
// epilogue as the reference's (sum * w_scale) * s_x + bias. Per-block scales stay on the float
// path. Subnormal bf16 inputs (denormals-are-zero in vdpbf16ps) cannot occur: the smallest e4m3
// magnitude is 2^-9.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/blocked_gemm.h"

namespace pyquant {

// True on CPUs with AVX512-BF16 when the ISA level is AVX-512 (PYQUANT_CPU_ISA does not cap it),
// PYQUANT_CPU_FP8_BF16 is not "0", and either it is "1" or the core's vdpbf16ps does multiply-adds
// at least 1.25x as fast as its FP32 FMAs (Bf16DotFasterThanFma: timed once per process, ~1 ms;
// true on AMD Zen 4, false on a Xeon whose bf16 dot products run at half its FMA rate). The
// environment is read at every call (the op calls this at kernel creation).
bool Fp8Bf16GemmAvailable();

// bf16 bits of a quantized activation (a float that holds an e4m3 value, or NaN): its top 16 bits,
// exact for such values.
inline uint16_t Fp8ValueToBf16Bits(float v) {
  uint32_t u;
  __builtin_memcpy(&u, &v, 4);
  return static_cast<uint16_t>(u >> 16);
}

// bt (above) of kc values from rows[j] (each at k0; columns past N point at zeros).
void DecodeFp8PanelBf16(const uint8_t* const* rows, int64_t kc, uint32_t* bt);

// acc0 += A · panel0, acc1 += A · panel1 over `pairs` k-pairs, for `rows` rows of A (row stride
// lda bf16, starting at the chunk's k0).
void MicroKernelBf16x2(const uint16_t* a, int64_t lda, int rows, const uint32_t* bt0, const uint32_t* bt1,
                       int64_t pairs, float* acc0, float* acc1);

// One task of PlanGemmTasks(m, n) (cpu/blocked_gemm.h), as RunGemmTask: decode the group's panels
// per K chunk (in pairs; an odd last panel pairs with a zero one), run every row of the task over
// them, then epilogue(row, n0, cols, acc) with acc[j] = sum_k A[row, k] * code value of W[n0 + j, k].
template <typename Epilogue>
void RunFp8Bf16Task(const GemmTasks& t, size_t task, const uint16_t* a, int64_t lda, int64_t m, int64_t k, int64_t n,
                    const uint8_t* w, const Epilogue& epilogue) {
  static const uint8_t kZeroRow[kKc] = {};  // e4m3 code 0 is +0
  const GemmTaskSpan s = TaskSpan(t, task, m);
  const int64_t p0 = s.p0, np = s.np, m0 = s.m0, rows = s.rows;
  if (rows <= 0) return;
  constexpr int64_t kPanelWords = kKc / 2 * kNr;
  thread_local std::vector<uint32_t> bt_buf;
  thread_local std::vector<float> acc_buf, spare_acc;
  bt_buf.resize(static_cast<size_t>(2 * kPanelWords));
  acc_buf.assign(static_cast<size_t>(np * rows * kNr), 0.0f);
  spare_acc.assign(static_cast<size_t>(rows * kNr), 0.0f);  // the zero panel's sums, never read
  for (int64_t k0 = 0; k0 < k; k0 += kKc) {
    const int64_t kc = std::min<int64_t>(kKc, k - k0);
    for (int64_t pi = 0; pi < np; pi += 2) {
      for (int64_t q = 0; q < 2; ++q) {
        const int64_t n0 = (p0 + pi + q) * kNr;
        const uint8_t* rows_w[kNr];
        for (int j = 0; j < kNr; ++j) rows_w[j] = pi + q < np && n0 + j < n ? w + (n0 + j) * k + k0 : kZeroRow;
        DecodeFp8PanelBf16(rows_w, kc, bt_buf.data() + q * kPanelWords);
      }
      float* acc = acc_buf.data() + pi * rows * kNr;
      float* acc1 = pi + 1 < np ? acc + rows * kNr : spare_acc.data();
      MicroKernelBf16x2(a + m0 * lda + k0, lda, static_cast<int>(rows), bt_buf.data(), bt_buf.data() + kPanelWords,
                        (kc + 1) / 2, acc, acc1);
    }
  }
  TaskEpilogue(s, n, acc_buf.data(), epilogue);
}

template <typename Epilogue>
void Fp8Bf16Gemm(OrtKernelContext* ctx, const uint16_t* a, int64_t lda, int64_t m, int64_t k, int64_t n,
                 const uint8_t* w, const Epilogue& epilogue) {
  const GemmTasks t = PlanGemmTasks(m, n);
  ParallelFor(ctx, t.count(), [&](size_t task) { RunFp8Bf16Task(t, task, a, lda, m, k, n, w, epilogue); });
}

}  // namespace pyquant
