"""LinearFp8 on the CPU EP against the float64 reference (pyquant.reference)."""

import numpy as np
import pytest

from pyquant import layout, reference
from pyquant.ops_spec import FP8_OP
from tests.ops.graphs import fp8_model, np_dtype, run

DTYPES = ["float32", "float16", "bfloat16"]


def _check(
    rng, k, n, dtype, block_size=0, x_scale=None, with_bias=False, lead=(5,), x=None, weight_only=False
):
    w = rng.standard_normal((n, k)).astype(np.float32)
    wq, ws = layout.quantize_weight_fp8(w, block_size)
    bias = rng.standard_normal(n).astype(np_dtype(dtype)) if with_bias else None
    if x is None:
        x = (rng.standard_normal((*lead, k)) * rng.uniform(0.01, 30, size=(*lead, 1))).astype(np_dtype(dtype))
    model = fp8_model(
        wq,
        ws,
        dtype,
        block_size,
        x_scale,
        bias,
        x_shape=[f"d{i}" for i in range(x.ndim - 1)] + [None],
        weight_only=1 if weight_only else None,
    )
    y = run(model, x)
    y_ref, mag = reference.linear_fp8_ref(x, wq, ws, block_size, x_scale, bias, weight_only=weight_only)
    reference.assert_within_limit(y, y_ref, mag, dtype, op=FP8_OP)
    return y


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [0, 32, 128])
@pytest.mark.parametrize("with_bias", [False, True])
def test_dynamic_matches_reference(rng, dtype, block_size, with_bias):
    _check(rng, 320, 40, dtype, block_size, None, with_bias, lead=(2, 3))


@pytest.mark.parametrize("dtype", DTYPES)
def test_static_scale(rng, dtype):
    _check(rng, 256, 24, dtype, 0, x_scale=0.01, with_bias=True)


def test_static_scale_saturates(rng):
    """Activations beyond 448 * x_scale saturate to +-448 (never NaN)."""
    k, n = 64, 8
    x = rng.standard_normal((4, k)).astype(np.float32) * 1e4
    y = _check(rng, k, n, "float32", 0, x_scale=1.0, x=x)
    assert np.isfinite(y).all()


@pytest.mark.parametrize("k,bs", [(100, 32), (300, 128), (17, 16)])
def test_k_not_multiple_of_block(rng, k, bs):
    _check(rng, k, 19, "float32", bs)


@pytest.mark.parametrize("lead", [(1,), (4,), (301,)])
def test_rows(rng, lead):
    _check(rng, 128, 50, "float16", 0, None, True, lead=lead)


def test_zero_nan_inf_rows(rng):
    k, n = 64, 6
    x = rng.standard_normal((4, k)).astype(np.float32)
    x[0] = 0.0  # amax 0 -> scale 1, outputs exactly bias (0)
    x[1, 3] = np.nan  # NaN propagates to the row
    x[2, 7] = np.inf  # infinite amax -> NaN row (docs/ops.md)
    y = _check(rng, k, n, "float32", 0, x=x)
    assert (y[0] == 0).all() and np.isnan(y[1]).all() and np.isnan(y[2]).all() and np.isfinite(y[3]).all()


# Large M (past the small-M kernels: M > 16, or M > 8 for the bf16 GEMM, cpu/gemv.h): per-channel
# scales run the AVX512-BF16 GEMM where the CPU has it and its bf16 dot products outrun its FMAs
# (cpu/fp8_bf16_gemm.h), else the float one; PYQUANT_CPU_FP8_BF16=0 pins the float path, =1 the bf16
# one wherever the CPU has AVX512-BF16 (else the float one) (read at kernel creation). K = 301: an
# odd tail after the 256-value chunk (vector decode of 32 codes per step, then a scalar tail with
# the last pair half past K); K = 520: two full chunks and 8 values; N = 37: three panels, the last
# partial and paired with a zero panel; M = 70: row tiles of 8 x 8 + 4 + 2; M = 12 (bf16 GEMM, else the
# small-M path).
_ENGINE_KNOB = {"float": "0", "bf16": "1"}


@pytest.mark.parametrize("engine", ["default", "float", "bf16"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_scale", [None, 0.02])
@pytest.mark.parametrize("k", [301, 520])
@pytest.mark.parametrize("m", [12, 70])
def test_large_m_gemms(rng, monkeypatch, engine, dtype, x_scale, k, m):
    if engine in _ENGINE_KNOB:
        monkeypatch.setenv("PYQUANT_CPU_FP8_BF16", _ENGINE_KNOB[engine])
    _check(rng, k, 37, dtype, 0, x_scale, True, lead=(m,))


@pytest.mark.parametrize("engine", ["default", "float", "bf16"])
def test_large_m_zero_nan_inf_rows(rng, monkeypatch, engine):
    if engine in _ENGINE_KNOB:
        monkeypatch.setenv("PYQUANT_CPU_FP8_BF16", _ENGINE_KNOB[engine])
    k, n = 96, 21
    x = rng.standard_normal((40, k)).astype(np.float32)
    x[0] = 0.0
    x[11, 3] = np.nan
    x[23, 7] = np.inf
    y = _check(rng, k, n, "float32", 0, x=x)
    nan_rows = np.isnan(y).all(axis=1)
    assert (y[0] == 0).all() and nan_rows[11] and nan_rows[23]
    assert np.isfinite(np.delete(y, [11, 23], axis=0)).all()


def test_activation_quantization_bit_exact(rng):
    """With W = identity-like rows, Y exposes the quantized activations: they must be bit-exact."""
    k = 32
    w = np.eye(k, dtype=np.float32)
    wq, ws = layout.quantize_weight_fp8(w)
    x = (rng.standard_normal((6, k)) * 3).astype(np.float32)
    y = run(fp8_model(wq, ws), x)
    xq, s_x = layout.quantize_activations_fp8(x)
    w_diag = wq.astype(np.float64).diagonal() * ws
    recovered = y / (s_x[:, None].astype(np.float64) * w_diag[None, :])
    # Neighbouring e4m3 values differ by >= 1/16 relative: 1e-6 agreement means the same code.
    np.testing.assert_allclose(recovered, xq.astype(np.float64), rtol=1e-6, atol=0)


# --- weight_only = 1 (docs/ops.md "Weight-only"): X is not quantized ---------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [0, 32, 128])
@pytest.mark.parametrize("lead", [(1,), (3,), (2, 9)])
def test_weight_only_matches_reference(rng, dtype, block_size, lead):
    """Every row count of the small-M path (M <= 4 here) and the blocked GEMM, with bias."""
    _check(rng, 320, 40, dtype, block_size, None, True, lead=lead, weight_only=True)


@pytest.mark.parametrize("k,bs", [(100, 32), (300, 128), (17, 16), (17, 0)])
def test_weight_only_k_not_multiple_of_block(rng, k, bs):
    _check(rng, k, 19, "float16", bs, lead=(2,), weight_only=True)
    _check(rng, k, 19, "float32", bs, lead=(7,), weight_only=True)


def test_weight_only_keeps_activations(rng):
    """With W = identity rows, Y is X itself (times the exact weight scale): values far below
    e4m3's 3-bit precision survive, which the W8A8 path would round away."""
    k = 48
    wq, ws = layout.quantize_weight_fp8(np.eye(k, dtype=np.float32))
    x = (1.0 + rng.uniform(-0.01, 0.01, size=(5, k))).astype(np.float32)
    for lead in ((1,), (5,)):  # small-M path and blocked GEMM
        xx = x[: lead[0]]
        y = run(fp8_model(wq, ws, weight_only=1), xx)
        np.testing.assert_allclose(y / ws[None, :] / wq.astype(np.float64).diagonal()[None, :], xx, rtol=1e-6)
        y8 = run(fp8_model(wq, ws), xx)
        assert np.abs(y8 - xx).max() > 1e-3  # W8A8 rounds x to e4m3 (1 + 2^-3 steps near 1)


def test_weight_only_nan_inf_rows(rng):
    """No amax rule: a NaN or inf in X reaches only the outputs whose sums contain it."""
    k, n = 64, 6
    x = rng.standard_normal((4, k)).astype(np.float32)
    x[1, 3] = np.nan
    x[2, 7] = np.inf
    y = _check(rng, k, n, "float32", 0, x=x, weight_only=True)
    assert np.isfinite(y[0]).all() and np.isnan(y[1]).all() and np.isfinite(y[3]).all()


def test_weight_only_attribute_errors(rng):
    from tests.ops.graphs import ORT_ERRORS

    wq, ws = layout.quantize_weight_fp8(rng.standard_normal((8, 32)).astype(np.float32))
    x = rng.standard_normal((2, 32)).astype(np.float32)
    with pytest.raises(ORT_ERRORS, match="weight_only"):
        run(fp8_model(wq, ws, weight_only=2), x)
    with pytest.raises(ORT_ERRORS, match="x_scale.*weight_only"):
        run(fp8_model(wq, ws, x_scale=0.5, weight_only=1), x)
