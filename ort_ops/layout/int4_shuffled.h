// The GPU-resident "shuffled" order of MatMulInt4's codes: the single source of truth.
// Mirrored in Python by pyquant/layout.py (int4_shuffled_nibble); tests/ops/test_library.py
// checks that both agree, and the CUDA device tests check it against CUTLASS's reading of it
// (Int4ShuffleAtom, cuda/sm90/int4_gemm_sm90_kernel.cuh).
//
// The ONNX file always holds B in the documented row-major layout (int4_block.h). On a Hopper
// GPU the CUDA op rewrites a constant B in place, once, at session creation, into this order
// (cuda/matmul_int4_op.cc; docs/ops.md "GPU weight layout"); every CUDA kernel of that node then
// reads this order. Same bytes (N * K / 2), other positions; codes unchanged (raw q, 0..15).
//
// Requires N % 16 == 0 and K % 16 == 0 (the op uses it for N % 128 == 0, K % 64 == 0). The codes
// form 16 x 16 (N x K) tiles; tile (nt, kt) = rows 16 nt .. 16 nt + 15, k = 16 kt .. 16 kt + 15,
// 128 bytes, stored N-tile-fastest:
//
//   byte offset of tile (nt, kt) = 128 * (nt + (N / 16) * kt)
//
//   one tile = 8 pieces of 16 bytes; piece p holds rows p and p + 8, all 16 k:
//
//   +----------+----------+-----+----------+
//   | piece 0  | piece 1  | ... | piece 7  |   piece p = 4 words of 32 bits
//   +----------+----------+-----+----------+
//
//   word w (0..3) of piece p = the 8 codes that thread 4p + w of a warp holds as the A operand
//   of mma.sync m16n8k16 (and of a register-sourced wgmma): rows r0 = p, r1 = p + 8 and
//   k = 2w, 2w + 1, 2w + 8, 2w + 9 of the tile. Nibble i of the word (bits 4i .. 4i + 3, so byte
//   i / 2, low nibble for even i):
//
//     nibble   7        6        5        4        3        2        1        0
//            +--------+--------+--------+--------+--------+--------+--------+--------+
//            |r1,2w+9 |r0,2w+9 |r1,2w+1 |r0,2w+1 |r1,2w+8 |r0,2w+8 |r1,2w   |r0,2w   |
//            +--------+--------+--------+--------+--------+--------+--------+--------+
//
//   so (word & 0x000F000F) = row r0, k (2w, 2w + 1) as two 16-bit lanes, (word >> 4) the same for
//   r1, (word >> 8) r0 at (2w + 8, 2w + 9), (word >> 12) r1 there: each pair decodes straight
//   into one mma fragment register with the magic-number trick (cuda/matmul_int4_impl.cuh), and
//   a 16-byte piece is two whole rows over 16 consecutive k for a CUDA-core GEMV.
//
//   Within a tile (n, k < 16): nibble = 32 * (n % 8) + (n / 8) + 2 * (k / 8) + 4 * (k % 2)
//                                       + 8 * ((k / 2) % 4)
#pragma once

#include <cstdint>

#include "layout/int4_block.h"

namespace pyquant {

constexpr int kInt4ShuffleTile = 16;        // rows and k per tile
constexpr int kInt4ShuffleTileBytes = 128;  // 256 codes
constexpr int kInt4ShufflePieceBytes = 16;  // rows p, p + 8 over the tile's 16 k

// One tile as C++ sees it: 8 pieces of 4 words.
struct Int4ShuffledPiece {
  uint32_t words[4];
};
struct Int4ShuffledTile {
  Int4ShuffledPiece pieces[8];
};
static_assert(sizeof(Int4ShuffledPiece) == kInt4ShufflePieceBytes, "a piece is one 16-byte load");
static_assert(sizeof(Int4ShuffledTile) == kInt4ShuffleTileBytes, "a tile is 256 codes");

// The shape can be shuffled (rows and k whole tiles).
constexpr bool Int4ShuffleFits(int64_t n, int64_t k) { return n > 0 && k > 0 && n % 16 == 0 && k % 16 == 0; }

// Nibble index (0 .. N * K - 1) of code (n, k) in the shuffled order of an [N, K] weight.
PYQUANT_HD int64_t Int4ShuffledNibble(int64_t n, int64_t k, int64_t n_rows) {
  const int64_t tile = (n >> 4) + (n_rows >> 4) * (k >> 4);
  const int64_t in_tile = 32 * (n & 7) + ((n >> 3) & 1) + 2 * ((k >> 3) & 1) + 4 * (k & 1) + 8 * ((k >> 1) & 3);
  return 256 * tile + in_tile;
}

// The code (0..15) of (n, k) from a shuffled buffer.
PYQUANT_HD int Int4ShuffledCodeAt(const uint8_t* shuffled, int64_t n, int64_t k, int64_t n_rows) {
  const int64_t i = Int4ShuffledNibble(n, k, n_rows);
  const uint8_t byte = shuffled[i >> 1];
  return (i & 1) ? (byte >> 4) : (byte & 0xF);
}

}  // namespace pyquant
