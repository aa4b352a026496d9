"""Python mirror of the packed layouts in ``ort_ops/layout/int4_block.h`` (see docs/ops.md).

The C++ header is the source of truth; ``tests/test_layout.py`` checks that the constants here
agree with it. Everything is plain numpy so that the reference needs nothing of ours.

INT4 block layout (same as ORT's ``com.microsoft.MatMulNBits`` with bits=4)::

    B[n, blk, j] = q[n, blk*bs + 2j] | (q[n, blk*bs + 2j + 1] << 4)      (uint8)
    zero_points[n, i] = zp[n, 2i] | (zp[n, 2i + 1] << 4)                   (uint8)
    W[n, k] = (q[n, k] - zp[n, k // bs]) * scales[n, k // bs]
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

# --- constants mirrored from ort_ops/layout/int4_block.h -------------------------------------
INT4_BITS = 4
INT4_CODES_PER_BYTE = 2
INT4_MIN_BLOCK = 16
INT4_MAX_BLOCK = 256
INT4_SYMMETRIC_ZERO_POINT = 8
FP8_E4M3_MAX = 448.0

FP8_DTYPE = ml_dtypes.float8_e4m3fn


def check_block_size(block_size: int) -> None:
    if not (
        isinstance(block_size, int)
        and INT4_MIN_BLOCK <= block_size <= INT4_MAX_BLOCK
        and block_size & (block_size - 1) == 0
    ):
        raise ValueError(
            f"block_size must be a power of two in [{INT4_MIN_BLOCK}, {INT4_MAX_BLOCK}], got {block_size!r}"
        )


def n_blocks(k: int, block_size: int) -> int:
    return math.ceil(k / block_size)


def zero_point_bytes(k: int, block_size: int) -> int:
    return math.ceil(n_blocks(k, block_size) / INT4_CODES_PER_BYTE)


def pack_int4(q: np.ndarray, block_size: int, pad_code: int = 0) -> np.ndarray:
    """q: uint8 codes [N, K] in 0..15 -> B [N, n_blocks, block_size/2] uint8."""
    check_block_size(block_size)
    q = np.asarray(q)
    if q.ndim != 2:
        raise ValueError(f"codes must be 2-D [N, K], got shape {q.shape}")
    if q.size and (q.min() < 0 or q.max() > 15):
        raise ValueError("int4 codes must lie in 0..15")
    n, k = q.shape
    nb = n_blocks(k, block_size)
    padded = np.full((n, nb * block_size), pad_code, dtype=np.uint8)
    padded[:, :k] = q
    lo = padded[:, 0::2]
    hi = padded[:, 1::2]
    return (lo | (hi << 4)).astype(np.uint8).reshape(n, nb, block_size // 2)


def unpack_int4(b: np.ndarray, k: int) -> np.ndarray:
    """B [N, n_blocks, block_size/2] uint8 -> codes [N, K] uint8."""
    b = np.asarray(b, dtype=np.uint8)
    n = b.shape[0]
    flat = b.reshape(n, -1)
    out = np.empty((n, flat.shape[1] * 2), dtype=np.uint8)
    out[:, 0::2] = flat & 0xF
    out[:, 1::2] = flat >> 4
    return out[:, :k]


def pack_zero_points(zp: np.ndarray) -> np.ndarray:
    """zp: uint8 [N, n_blocks] in 0..15 -> [N, ceil(n_blocks/2)] uint8."""
    zp = np.asarray(zp)
    if zp.size and (zp.min() < 0 or zp.max() > 15):
        raise ValueError("int4 zero points must lie in 0..15")
    n, nb = zp.shape
    padded = np.zeros((n, 2 * math.ceil(nb / 2)), dtype=np.uint8)
    padded[:, :nb] = zp
    return (padded[:, 0::2] | (padded[:, 1::2] << 4)).astype(np.uint8)


def unpack_zero_points(zp_packed: np.ndarray, nb: int) -> np.ndarray:
    zp_packed = np.asarray(zp_packed, dtype=np.uint8)
    n = zp_packed.shape[0]
    flat = zp_packed.reshape(n, -1)
    out = np.empty((n, flat.shape[1] * 2), dtype=np.uint8)
    out[:, 0::2] = flat & 0xF
    out[:, 1::2] = flat >> 4
    return out[:, :nb]


# --- the GPU-resident shuffled order (ort_ops/layout/int4_shuffled.h) -----------------------
INT4_SHUFFLE_TILE = 16
INT4_SHUFFLE_TILE_BYTES = 128


def int4_shuffled_nibble(n: np.ndarray, k: np.ndarray, n_rows: int) -> np.ndarray:
    """Nibble index of code (n, k) of an [n_rows, K] weight in the shuffled order that the CUDA op
    gives a constant B on Hopper GPUs (16 x 16 tiles, N-tile fastest; inside a tile the
    mma.sync A-fragment order). Mirrors ``Int4ShuffledNibble`` of the C++ header."""
    n = np.asarray(n, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    if n_rows % INT4_SHUFFLE_TILE:
        raise ValueError(f"the shuffled order needs N % 16 == 0, got N = {n_rows}")
    tile = (n >> 4) + (n_rows >> 4) * (k >> 4)
    in_tile = 32 * (n & 7) + ((n >> 3) & 1) + 2 * ((k >> 3) & 1) + 4 * (k & 1) + 8 * ((k >> 1) & 3)
    return 256 * tile + in_tile


def shuffle_int4(q: np.ndarray) -> np.ndarray:
    """Codes [N, K] (N % 16 == 0, K % 16 == 0) -> the shuffled bytes [N * K / 2] uint8."""
    q = np.asarray(q, dtype=np.uint8)
    n_rows, k = q.shape
    if n_rows % INT4_SHUFFLE_TILE or k % INT4_SHUFFLE_TILE:
        raise ValueError(f"the shuffled order needs N and K multiples of 16, got {q.shape}")
    nn, kk = np.meshgrid(np.arange(n_rows), np.arange(k), indexing="ij")
    nibbles = np.zeros(n_rows * k, dtype=np.uint8)
    nibbles[int4_shuffled_nibble(nn, kk, n_rows).ravel()] = q.ravel()
    return (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8)


def dequantize_int4(
    b: np.ndarray,
    scales: np.ndarray,
    k: int,
    block_size: int,
    zero_points: np.ndarray | None = None,
) -> np.ndarray:
    """Packed weight -> float64 W [N, K], exactly as docs/ops.md defines it."""
    q = unpack_int4(b, k).astype(np.float64)
    n = q.shape[0]
    nb = n_blocks(k, block_size)
    s = np.asarray(scales, dtype=np.float64).reshape(n, nb)
    if zero_points is None:
        zp = np.full((n, nb), INT4_SYMMETRIC_ZERO_POINT, dtype=np.float64)
    else:
        zp = unpack_zero_points(np.asarray(zero_points).reshape(n, -1), nb).astype(np.float64)
    blk = np.arange(k) // block_size
    return (q - zp[:, blk]) * s[:, blk]


def quantize_int4_rtn(
    w: np.ndarray, block_size: int, symmetric: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Round-to-nearest block quantization of float W [N, K].

    Returns (B packed, scales float32 [N, n_blocks], packed zero points or None).
    Symmetric: scale = amax / 7 and codes q = clip(round(w / scale) + 8, 0, 15) (range -8..7
    around 8). Asymmetric: scale = (max - min) / 15, zp = clip(round(-min / scale), 0, 15).
    """
    check_block_size(block_size)
    w = np.asarray(w, dtype=np.float32)
    n, k = w.shape
    nb = n_blocks(k, block_size)
    padded = np.zeros((n, nb * block_size), dtype=np.float32)
    padded[:, :k] = w
    blocks = padded.reshape(n, nb, block_size)
    if symmetric:
        amax = np.abs(blocks).max(axis=2)
        scales = (amax / 7.0).astype(np.float32)
        safe = np.where(scales == 0, 1.0, scales)
        q = np.clip(np.rint(blocks / safe[..., None]) + 8, 0, 15).astype(np.uint8)
        zp_packed = None
    else:
        lo = np.minimum(blocks.min(axis=2), 0.0)
        hi = np.maximum(blocks.max(axis=2), 0.0)
        scales = ((hi - lo) / 15.0).astype(np.float32)
        safe = np.where(scales == 0, 1.0, scales)
        zp = np.clip(np.rint(-lo / safe), 0, 15).astype(np.uint8)
        q = np.clip(np.rint(blocks / safe[..., None]) + zp[..., None], 0, 15).astype(np.uint8)
        zp_packed = pack_zero_points(zp)
    codes = q.reshape(n, nb * block_size)[:, :k]
    return pack_int4(codes, block_size), scales, zp_packed


# --- FP8 e4m3fn --------------------------------------------------------------------------------


def to_fp8(x: np.ndarray) -> np.ndarray:
    """Saturating cast float -> float8_e4m3fn (round to nearest even; NaN stays NaN)."""
    x = np.asarray(x, dtype=np.float32)
    return np.clip(x, -FP8_E4M3_MAX, FP8_E4M3_MAX).astype(FP8_DTYPE)


def quantize_activations_fp8(x: np.ndarray, x_scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """x float [M, K] -> (xq fp8 [M, K], s_x float32 [M]) per docs/ops.md, bit-exact."""
    x = np.asarray(x, dtype=np.float32)
    m = x.shape[0]
    if x_scale is not None:
        s = np.float32(x_scale)
        inv = np.float32(1.0) / s
        return to_fp8(x * inv), np.full((m,), s, dtype=np.float32)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        amax = np.nanmax(np.abs(x), axis=1, initial=0.0).astype(np.float32)
        zero = amax == 0
        inv = np.where(zero, np.float32(1), np.float32(FP8_E4M3_MAX) / amax).astype(np.float32)
        s_x = np.where(zero, np.float32(1), amax / np.float32(FP8_E4M3_MAX)).astype(np.float32)
        xq = to_fp8(x * inv[:, None])
    return xq, s_x


def quantize_weight_fp8(w: np.ndarray, block_size: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (block_size 0) or per-block RTN of W [N, K] -> (fp8 [N, K], scales float32)."""
    w = np.asarray(w, dtype=np.float32)
    n, k = w.shape
    if block_size == 0:
        amax = np.abs(w).max(axis=1)
        scale = np.where(amax == 0, 1.0, amax / FP8_E4M3_MAX).astype(np.float32)
        return to_fp8(w / scale[:, None]), scale
    nb = math.ceil(k / block_size)
    padded = np.zeros((n, nb * block_size), dtype=np.float32)
    padded[:, :k] = w
    amax = np.abs(padded.reshape(n, nb, block_size)).max(axis=2)
    scale = np.where(amax == 0, 1.0, amax / FP8_E4M3_MAX).astype(np.float32)
    expanded = np.repeat(scale, block_size, axis=1)[:, :k]
    return to_fp8(w / expanded), scale
