"""Ground-truth references for the pyquant ops, in numpy float64 (see docs/ops.md).

They use nothing but numpy/ml_dtypes and ``pyquant.layout`` (the documented packing), so the C++,
CUDA and torch implementations are all checked against an independent model of the spec.
"""

from __future__ import annotations

import numpy as np

from pyquant import layout
from pyquant.ops_spec import ERROR_ATOL, INT4_ACCURACY_LEVELS, INT4_INT8_ACTIVATIONS, INT4_OP


def quantize_activations_int8_ref(x: np.ndarray, k: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """MatMulInt4's int8 activations (accuracy_level 4, docs/ops.md "Int8 activations").

    x [..., K] (any float dtype; used as float32) -> (xq int32 [M, n_blocks * block_size], zero past K;
    s_x float32 [M, n_blocks]), every step one IEEE float32 operation: amax over the block,
    inv = 127 / amax, s_x = amax / 127, xq = round_half_even(x * inv). amax == 0: s_x = 0, xq = 0;
    amax not finite (Inf / NaN in the block): s_x = NaN, xq = 0.

    Beyond the spec: an amax below 127 / FLT_MAX (~3.7e-37) makes inv = Inf; then x * inv is +-Inf (or
    NaN for x == 0), which is taken as +-127 (0) here, i.e. the product is clamped to [-127, 127] and a
    NaN product is 0.
    """
    x32 = np.asarray(x, dtype=np.float32).reshape(-1, k)
    m, nb = x32.shape[0], layout.n_blocks(k, block_size)
    padded = np.zeros((m, nb * block_size), dtype=np.float32)
    padded[:, :k] = x32
    blocks = padded.reshape(m, nb, block_size)
    with np.errstate(invalid="ignore", over="ignore"):
        amax = np.abs(blocks).max(axis=2)  # NaN propagates: a NaN block has amax NaN
        finite = np.isfinite(amax)
        usable = finite & (amax > 0)
        safe = np.where(usable, amax, np.float32(1.0))
        inv = np.float32(127.0) / safe  # float32 / float32 -> float32, rounded once
        s_x = np.where(
            usable, safe / np.float32(127.0), np.where(finite, np.float32(0.0), np.float32(np.nan))
        )
        prod = blocks * inv[:, :, None]  # float32
        xq = np.clip(np.rint(np.nan_to_num(prod, nan=0.0)), -127, 127)  # np.rint: half to even
    xq = np.where(usable[:, :, None], xq, 0).astype(np.int32)
    return xq.reshape(m, nb * block_size), s_x.astype(np.float32)


def _matmul_int4_int8_ref(
    x: np.ndarray,
    b: np.ndarray,
    scales: np.ndarray,
    k: int,
    n: int,
    block_size: int,
    zero_points: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """accuracy_level 4 without bias: (y float64 [M, N], magnitude [M, N])."""
    nb = layout.n_blocks(k, block_size)
    xq, s_x = quantize_activations_int8_ref(x, k, block_size)
    m = xq.shape[0]
    q = layout.unpack_int4(b, nb * block_size).astype(np.int64).reshape(n, nb, block_size)
    if zero_points is None:
        zp = np.full((n, nb), layout.INT4_SYMMETRIC_ZERO_POINT, dtype=np.int64)
    else:
        zp = layout.unpack_zero_points(np.asarray(zero_points).reshape(n, -1), nb).astype(np.int64)
    qz = (q - zp[:, :, None]).astype(np.float64)
    qz[:, nb - 1, k - (nb - 1) * block_size :] = 0  # codes past K are ignored
    xqb = xq.reshape(m, nb, block_size).astype(np.float64)
    # Exact integer dots (|dot| <= 256 * 127 * 15), one [M, N] matrix per block.
    dots = np.matmul(xqb.transpose(1, 0, 2), qz.transpose(1, 2, 0))  # [nb, M, N]
    s32 = np.asarray(scales, dtype=np.float32).reshape(n, nb)
    y = np.zeros((m, n), dtype=np.float64)
    mag = np.zeros((m, n), dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(nb):
            sp = (s32[None, :, i] * s_x[:, i, None]).astype(np.float64)  # rounded to float32, as documented
            y += sp * dots[i]
            # sum_k |xq s_x| |(q - zp) scale| over the block
            absdot = np.abs(xqb[:, i, :]) @ np.abs(qz[:, i, :]).T
            mag += (
                np.abs(s_x[:, i, None].astype(np.float64))
                * np.abs(s32[None, :, i].astype(np.float64))
                * absdot
            )
    return y, mag


def matmul_int4_ref(
    x: np.ndarray,
    b: np.ndarray,
    scales: np.ndarray,
    k: int,
    n: int,
    block_size: int,
    zero_points: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    *,
    accuracy_level: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Returns (y float64 [..., N], magnitude sum_k |x w| [..., N]) for the error bound.

    accuracy_level 0-3: X as float32 (y = X W^T exactly). 4: int8 activations (docs/ops.md): y is the
    float64 value of sum_b float32(scales[n, b] * s_x[m, b]) * dot[m, n, b], and the magnitude has the
    dequantized activation xq * s_x in place of x.
    """
    if accuracy_level not in INT4_ACCURACY_LEVELS:
        raise ValueError(f"accuracy_level must be one of {INT4_ACCURACY_LEVELS}, got {accuracy_level!r}")
    if accuracy_level == INT4_INT8_ACTIVATIONS:
        y, mag = _matmul_int4_int8_ref(x, b, scales, k, n, block_size, zero_points)
    else:
        with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN scales propagate as IEEE says
            w = layout.dequantize_int4(b, scales, k, block_size, zero_points)
            assert w.shape == (n, k)
            x64 = np.asarray(x, dtype=np.float64).reshape(-1, k)
            y = x64 @ w.T
            mag = np.abs(x64) @ np.abs(w).T
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    lead = np.asarray(x).shape[:-1]
    return y.reshape(*lead, n), mag.reshape(*lead, n)


def linear_fp8_ref(
    x: np.ndarray,
    w_fp8: np.ndarray,
    w_scale: np.ndarray,
    block_size: int = 0,
    x_scale: float | None = None,
    bias: np.ndarray | None = None,
    weight_only: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """LinearFp8 in float64 -> (y, sum_k |x w| for the error limit). weight_only: X not quantized
    (xq = float32(X), s_x = 1; docs/ops.md "Weight-only")."""
    n, k = w_fp8.shape
    lead = np.asarray(x).shape[:-1]
    x32 = np.asarray(x, dtype=np.float32).reshape(-1, k)
    if weight_only:
        if x_scale is not None:
            raise ValueError("weight_only takes no x_scale")
        xq, s_x = x32, np.ones(x32.shape[0], dtype=np.float32)
    else:
        xq, s_x = layout.quantize_activations_fp8(x32, x_scale)
    xq64 = xq.astype(np.float64)
    w64 = np.asarray(w_fp8).astype(np.float64)
    ws = np.asarray(w_scale, dtype=np.float64)
    if block_size == 0:
        wd = w64 * ws.reshape(n, 1)
    else:
        blk = np.arange(k) // block_size
        wd = w64 * ws.reshape(n, -1)[:, blk]
    with np.errstate(invalid="ignore", over="ignore"):
        y = (xq64 @ wd.T) * s_x.astype(np.float64)[:, None]
        mag = (np.abs(xq64) @ np.abs(wd).T) * np.abs(s_x.astype(np.float64))[:, None]
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    return y.reshape(*lead, n), mag.reshape(*lead, n)


_MAX_FINITE = {"float32": 3.4028234663852886e38, "float16": 65504.0, "bfloat16": 3.3895313892515355e38}


def _ulp(y: np.ndarray, dtype_name: str) -> np.ndarray:
    mant = {"float32": 23, "float16": 10, "bfloat16": 7}[dtype_name]
    tiny = {"float32": 2.0**-149, "float16": 2.0**-24, "bfloat16": 2.0**-133}[dtype_name]
    a = np.abs(y)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    return np.maximum(2.0 ** (e - mant), tiny)


def assert_within_limit(
    y: np.ndarray, y_ref: np.ndarray, mag: np.ndarray, dtype_name: str, op: str = INT4_OP
) -> None:
    """The single error criterion of docs/ops.md (op is INT4_OP or FP8_OP):
    |y - ref| <= atol(op, T) * sum_k |x w| + ulp_T(ref)."""
    y = np.asarray(y, dtype=np.float64)
    assert y.shape == y_ref.shape, (y.shape, y_ref.shape)
    nan_ref = np.isnan(y_ref)
    assert np.array_equal(np.isnan(y), nan_ref), "NaN pattern differs from the reference"
    # Values at (within 2% of) or beyond T's largest finite value may round to +-inf in T.
    overflow = ~nan_ref & (np.abs(y_ref) >= 0.98 * _MAX_FINITE[dtype_name])
    if overflow.any():
        assert np.array_equal(np.sign(y[overflow]), np.sign(y_ref[overflow])), "overflow changed sign"
    ok = ~nan_ref & ~overflow
    bound = ERROR_ATOL[op][dtype_name] * mag[ok] + _ulp(y_ref[ok], dtype_name)
    err = np.abs(y[ok] - y_ref[ok])
    bad = err > bound
    if bad.any():
        i = int(np.argmax(err - bound))
        raise AssertionError(
            f"{int(bad.sum())} of {err.size} elements outside the {dtype_name} error limit; "
            f"worst |err|={err[i]:.3e} > bound={bound[i]:.3e} (ref={y_ref[ok][i]:.6g}, got={y[ok][i]:.6g})"
        )
