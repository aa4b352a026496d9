"""Ground-truth references for the pyquant ops, in numpy float64 (see docs/ops.md).

They use nothing but numpy/ml_dtypes and ``pyquant.layout`` (the documented packing), so the C++,
CUDA and torch implementations are all checked against an independent model of the spec.
"""

from __future__ import annotations

import numpy as np

from pyquant import layout
from pyquant.ops_spec import ERROR_ATOL, INT4_OP


def matmul_int4_ref(
    x: np.ndarray,
    b: np.ndarray,
    scales: np.ndarray,
    k: int,
    n: int,
    block_size: int,
    zero_points: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Returns (y float64 [..., N], magnitude sum_k |x w| [..., N]) for the error bound."""
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
) -> tuple[np.ndarray, np.ndarray]:
    n, k = w_fp8.shape
    lead = np.asarray(x).shape[:-1]
    x32 = np.asarray(x, dtype=np.float32).reshape(-1, k)
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
