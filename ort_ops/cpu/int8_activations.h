// MatMulInt4 with int8 activations (accuracy_level = 4; docs/ops.md, "Int8 activations"), CPU EP.
//
// Why: with X rounded to int8 per row and weight block, every product (q - zp) * xq is a small
// integer, and x86 SIMD multiplies 8-bit integers pairwise into 16-bit sums (AVX2 vpmaddubsw: 32
// products per instruction, against 8 for a float32 FMA). The weight decode also shrinks to an
// AND, a shift and a subtract per 32 codes, with no conversion to float. This is ORT's
// MatMulNBits accuracy_level 4 contract, under the same name.
//
//   dot[m, n, b] = sum_{k in b} (q[n, k] - zp[n, b]) * xq[m, k]          (exact, int32)
//                = sum_{k in b} q[n, k] * xq[m, k] - zp[n, b] * sum_{k in b} xq[m, k]
//   Y[m, n]      = sum_b float32(scales[n, b] * s_x[m, b]) * dot[m, n, b]  (float32 sums)
//
// Two steps per call: QuantizeActivationsInt8 (X -> xq, s_x, in the weights' order), then
// Int4Int8Rows per range of output columns (the parallel tasks of cpu/gemv.h's RunGemvTasks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "cpu/gemv.h"

namespace pyquant {

// X quantized per row and block, split by k parity like the float small-M path (cpu/gemv.h): byte
// j of a row's even half is xq[m, 2j], of its odd half xq[m, 2j + 1], so that the low / high
// nibbles of packed weight byte j meet them. Zero from K to the row stride, which covers the
// padded K (n_blocks * block_size) rounded up to 64 codes: the kernels read whole 32-byte chunks.
struct Int8Activations {
  int64_t m = 0;
  int64_t n_blocks = 0;
  int64_t stride = 0;         // bytes per row of each half, a multiple of 32
  std::vector<int8_t> codes;  // [2][m][stride]: even half of every row, then the odd half
  std::vector<float> scales;  // [m][n_blocks] s_x (0 for an all-zero block, NaN for a non-finite one)
  std::vector<int32_t> sums;  // [m][n_blocks] sum of the block's xq (the zero point's share of a dot)
  // Blocks of 16 / 32 / 64 codes, and larger ones at M < kInt8WideLanesMaxM (else empty): per row and
  // 64-code chunk of the padded K, the 8 int32 lanes of the AVX2 kernel's dot (lane l: codes 8l ..
  // 8l + 7; the AVX512-VNNI kernel reads two chunks' lanes at once). lane_scales holds each lane's
  // block s_x; lane_sums holds a block's sum(xq) in its first lane and 0 in the others; both are 0
  // past the last block.
  std::vector<float> lane_scales;  // [m][stride / 32][8]
  std::vector<int32_t> lane_sums;  // [m][stride / 32][8]
  const int8_t* even() const { return codes.data(); }
  const int8_t* odd() const { return codes.data() + m * stride; }
};

// Below this M the lane arrays are filled for every block size (the AVX512-VNNI kernel's 512-bit tiles
// read them below its GEMM's M, 16); above it only for blocks of <= 64 codes (the AVX2 tiles, M < 12).
constexpr int64_t kInt8WideLanesMaxM = 16;

// Quantizes X [m, k] (T = float, Half or BFloat16) per row and block of `block_size` codes, into
// *out (resized). Bit-exact with docs/ops.md and pyquant/reference.py's quantize_activations_int8_ref.
// lanes = false: the lane arrays are left empty (for the packed kernel, which does not read them).
template <typename T>
void QuantizeActivationsInt8(const T* x, int64_t m, int64_t k, int64_t block_size, Int8Activations* out,
                             bool lanes = true);

struct Int4Int8Params {
  const Int8Activations* x = nullptr;
  const uint8_t* b = nullptr;    // uint8 [N, n_blocks, block_size / 2], layout/int4_block.h
  const void* scales = nullptr;  // scale_type [N, n_blocks]
  ScaleType scale_type = ScaleType::kFloat32;
  const uint8_t* zp = nullptr;  // uint8 [N, ceil(n_blocks / 2)] 4-bit zero points, or null (= 8)
  int64_t block_size = 0;       // power of two, 16..256
};

// y[mi * ldy + (n - n0)] = the sum above for n in [n0, n1), mi < x->m (no bias). y: float
// [x->m, ldy], overwritten. Picks the AVX512-VNNI kernel, else the AVX2 one, where the CPU has them
// (PYQUANT_CPU_ISA caps the choice: avx2 -> the AVX2 kernel, base -> the portable one).
void Int4Int8Rows(const Int4Int8Params& p, int64_t n0, int64_t n1, float* y, int64_t ldy);

// B prepacked (built once per node at session creation where B and its scales / zero points are
// constant initializers, on AVX2 / AVX512 CPUs): 16 weight rows per panel, lanes = rows, so that
// each vpdpbusd (vpmaddubsw on AVX2) forms 16 rows' partial dots against one broadcast 4-byte group
// of X and the per-block convert / scale / add is shared by 16 outputs instead of paid per row (the
// lane-parallel tiles put one row's codes in all lanes), with no per-call panel build (the GEMM
// below decodes one per task). It then serves every M. Panel p holds rows 16 p .. 16 p + 15 (rows
// past N: zero codes, scale 0); per 4-byte group q of a packed row (codes 8 q .. 8 q + 7, byte j =
// code 8 q + 2 j in its low nibble, 8 q + 2 j + 1 in its high one: layout/int4_block.h's bytes,
// unchanged), 64 bytes:
//
//   byte  0      4      8           60     64
//         | row 0 | row 1 | ...      | row 15 |     each: that row's packed bytes 4 q .. 4 q + 3
//
// so codes[p][q] is one 512-bit (or two 256-bit) load whose low nibbles meet X's even-k bytes 4 q ..
// 4 q + 3 and whose high nibbles meet its odd-k bytes. The same bytes as B: memory doubles for the
// node's codes while the session holds both (a custom op cannot release the initializer).
// One thread, float32 X, block 128, ms per call, tiles / GEMM -> packed (MatMulNBits accuracy 4),
// bench/results/2026-11-29-cpu-s48-int8-packed.md: 4096^2 at M = 1 / 4 / 16 / 1024 0.188 / 0.464 /
// 1.64 / 84.2 -> 0.117 / 0.259 / 0.92 / 63.1 (0.109 / 0.327 / 1.28 / 84.9); 4096 x 14336 (from DRAM)
// at M = 1 0.794 -> 0.605 (0.912).
// Cache-line aligned storage for the packed arrays: every 64-byte load of the kernel is then one
// line (malloc's 16-byte alignment split each load across two lines in some runs: 4096^2 at M = 1
// took 0.112 or 0.143 ms by where the buffer landed).
template <class T>
struct Aligned64Allocator {
  using value_type = T;
  Aligned64Allocator() = default;
  template <class U>
  Aligned64Allocator(const Aligned64Allocator<U>&) {}
  T* allocate(size_t count) { return static_cast<T*>(::operator new(count * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
  template <class U>
  bool operator==(const Aligned64Allocator<U>&) const {
    return true;
  }
  template <class U>
  bool operator!=(const Aligned64Allocator<U>&) const {
    return false;
  }
};
template <class T>
using Aligned64Vector = std::vector<T, Aligned64Allocator<T>>;

struct Int4Int8Packed {
  int64_t n = 0, n_blocks = 0, block_size = 0;
  int64_t quads = 0;               // 4-byte groups per row: n_blocks * block_size / 8
  Aligned64Vector<uint8_t> codes;  // [panels][quads][64]
  Aligned64Vector<float> scales;   // [panels][n_blocks][16] float32 (exact from fp16 / bf16), 0 past N
  Aligned64Vector<int32_t> zp;     // [panels][n_blocks][16]; empty: symmetric (8)
  int64_t panels() const { return (n + 15) / 16; }
};

// Packs B (uint8 [N, n_blocks, block_size / 2]), its scales (scale_type [N, n_blocks]) and zero points
// (uint8 [N, ceil(n_blocks / 2)] or null) into *out.
void PackInt4Int8(const uint8_t* b, const void* scales, ScaleType scale_type, const uint8_t* zp, int64_t n,
                  int64_t n_blocks, int64_t block_size, Int4Int8Packed* out);
// Whether the CPU has the packed kernel's ISA (AVX2; AVX512-VNNI runs it on 512-bit vectors).
bool Int4Int8PackedAvailable();
// As Int4Int8Rows (same sums up to float32 order), from the packed B: n0 % 16 == 0.
void Int4Int8PackedRows(const Int4Int8Packed& pk, const Int8Activations& x, int64_t n0, int64_t n1, float* y,
                        int64_t ldy);

namespace int8_isa {
// One block of X for QuantizeActivationsInt8: BlockAbsMax* sets *amax = max |x[i]| over i < len and
// returns false when some x[i] is not finite; QuantizeBlock* (a finite block with amax > 0) writes
// code(i) = clamp(round_half_even(x[i] * inv), +-127) (NaN -> 0, for an infinite inv) to even[i / 2]
// (i even) / odd[i / 2] (i odd) and returns their sum. The AVX2 versions (int8_activations_avx2.cc,
// on AVX2 CPUs) are bit-identical to the portable ones (int8_activations.cc).
bool BlockAbsMaxBase(const float* x, int64_t len, float* amax);
int32_t QuantizeBlockBase(const float* x, int64_t len, float inv, int8_t* even, int8_t* odd);
bool BlockAbsMaxAvx2(const float* x, int64_t len, float* amax);
int32_t QuantizeBlockAvx2(const float* x, int64_t len, float inv, int8_t* even, int8_t* odd);

void Int4Int8RowsBase(const Int4Int8Params& p, int64_t n0, int64_t n1, float* y, int64_t ldy);
void Int4Int8RowsAvx2(const Int4Int8Params& p, int64_t n0, int64_t n1, float* y, int64_t ldy);
void Int4Int8RowsVnni(const Int4Int8Params& p, int64_t n0, int64_t n1, float* y, int64_t ldy);
void Int4Int8PackedRowsAvx2(const Int4Int8Packed& pk, const Int8Activations& x, int64_t n0, int64_t n1, float* y,
                            int64_t ldy);
void Int4Int8PackedRowsVnni(const Int4Int8Packed& pk, const Int8Activations& x, int64_t n0, int64_t n1, float* y,
                            int64_t ldy);
}  // namespace int8_isa

}  // namespace pyquant
