// Packed layouts of the pyquant ops: the single source of truth.
// Mirrored in Python by pyquant/layout.py; tests/test_layout.py checks that both agree.
//
// MatMulInt4 weight B: uint8 [N, n_blocks, block_size / 2], n_blocks = ceil(K / block_size).
// This is byte-for-byte ORT's com.microsoft.MatMulNBits (bits = 4) layout, so converting a model
// between the two ops never touches a weight, and one file runs on CPU and GPU.
//
//   row n (N-major; K is contiguous, so a GEMV streams each row once, 16-byte aligned when
//   block_size/2 >= 16 and B itself is 16-byte aligned):
//
//   +-------------------+-------------------+-----+-------------------------------+
//   | block 0           | block 1           | ... | block n_blocks-1 (tail padded) |
//   +-------------------+-------------------+-----+-------------------------------+
//     block_size/2 bytes each
//
//   one byte j of block b  (k0 = b * block_size):
//
//     bit   7   6   5   4   3   2   1   0
//         +---------------+---------------+
//         | q[k0 + 2j + 1]| q[k0 + 2j]    |      high nibble = odd k, low nibble = even k
//         +---------------+---------------+
//
//   zero_points (optional): uint8 [N, ceil(n_blocks / 2)], two blocks per byte:
//         | zp[2i + 1] (hi) | zp[2i] (lo) |      absent -> every zero point is 8
//
//   scales: T [N, n_blocks] (flat [N * n_blocks] accepted), T = X's element type.
//
//   W[n, k] = (q[n, k] - zp[n, k / block_size]) * float(scales[n, k / block_size])
//
// Codes at k >= K inside the last block are padding and are never read into a result.
//
// LinearFp8 weight W: float8e4m3fn [N, K], row-major (K contiguous). w_scale: float32 [N]
// (per channel) or [N, ceil(K / block_size)] (per block along K).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define PYQUANT_HD __host__ __device__ __forceinline__
#else
#define PYQUANT_HD inline
#endif

namespace pyquant {

constexpr int kInt4Bits = 4;
constexpr int kInt4CodesPerByte = 2;
constexpr int kInt4MinBlock = 16;
constexpr int kInt4MaxBlock = 256;
constexpr int kInt4SymmetricZeroPoint = 8;
constexpr float kFp8E4M3Max = 448.0f;

// One packed byte: two 4-bit codes.
struct Int4Pair {
  uint8_t bits;
  constexpr int lo() const { return bits & 0xF; }  // even k
  constexpr int hi() const { return bits >> 4; }   // odd k
};
static_assert(sizeof(Int4Pair) == 1, "Int4Pair must be one byte");

// A block of B for a compile-time block size: block_size/2 bytes, no header (scales and zero
// points live in their own tensors so the GPU can stream codes with 16-byte loads).
template <int kBlockSize>
struct Int4Block {
  static_assert(kBlockSize >= kInt4MinBlock && kBlockSize <= kInt4MaxBlock, "block size out of range");
  static_assert((kBlockSize & (kBlockSize - 1)) == 0, "block size must be a power of two");
  Int4Pair codes[kBlockSize / kInt4CodesPerByte];
};
static_assert(sizeof(Int4Block<16>) == 8, "block 16 = 8 bytes");
static_assert(sizeof(Int4Block<32>) == 16, "block 32 = 16 bytes (one 16-byte load)");
static_assert(sizeof(Int4Block<64>) == 32, "block 64 = 32 bytes");
static_assert(sizeof(Int4Block<128>) == 64, "block 128 = 64 bytes");
static_assert(sizeof(Int4Block<256>) == 128, "block 256 = 128 bytes");

constexpr bool IsValidInt4BlockSize(int64_t b) {
  return b >= kInt4MinBlock && b <= kInt4MaxBlock && (b & (b - 1)) == 0;
}
constexpr int64_t Int4NumBlocks(int64_t k, int64_t block_size) { return (k + block_size - 1) / block_size; }
constexpr int64_t Int4BlockBytes(int64_t block_size) { return block_size / kInt4CodesPerByte; }
constexpr int64_t Int4RowBytes(int64_t k, int64_t block_size) {
  return Int4NumBlocks(k, block_size) * Int4BlockBytes(block_size);
}
constexpr int64_t Int4ZeroPointRowBytes(int64_t k, int64_t block_size) {
  return (Int4NumBlocks(k, block_size) + 1) / 2;
}

// Code of element k in a packed row.
PYQUANT_HD int Int4CodeAt(const uint8_t* row, int64_t k) {
  const uint8_t byte = row[k >> 1];
  return (k & 1) ? (byte >> 4) : (byte & 0xF);
}
// Zero point of block b in a packed zero-point row.
PYQUANT_HD int Int4ZeroPointAt(const uint8_t* zp_row, int64_t b) {
  const uint8_t byte = zp_row[b >> 1];
  return (b & 1) ? (byte >> 4) : (byte & 0xF);
}

}  // namespace pyquant
