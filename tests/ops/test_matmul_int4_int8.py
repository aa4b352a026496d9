"""MatMulInt4 with int8 activations (accuracy_level = 4; ort_ops/cpu/int8_activations*) on the CPU EP
against the float64 reference of docs/ops.md (pyquant.reference, accuracy_level=4). The ISA caps run
`case` in test_cpu_isa.py."""

import numpy as np
import pytest

from pyquant import layout, reference
from tests.ops.graphs import ORT_ERRORS, int4_model, np_dtype, run

DTYPES = ["float32", "float16", "bfloat16"]


@pytest.fixture(autouse=True, params=["packed", "tiles"])
def int8_kernels(request, monkeypatch):
    """Every test twice: with B prepacked at session creation (the default where B is an
    initializer: Int4Int8Packed, every M) and without it (PYQUANT_CPU_INT8_PACK=0: the lane-parallel
    tiles below the GEMM's M, the GEMM from it). The packed tests below set the variable themselves."""
    if request.param == "tiles":
        monkeypatch.setenv("PYQUANT_CPU_INT8_PACK", "0")
    else:
        monkeypatch.delenv("PYQUANT_CPU_INT8_PACK", raising=False)
    return request.param


def _weights(rng, k, n, bs, symmetric):
    w = rng.standard_normal((n, k)).astype(np.float32) * rng.uniform(0.2, 2.0, size=(n, 1)).astype(np.float32)
    b, s, zp = layout.quantize_int4_rtn(w, bs, symmetric=symmetric)
    if not symmetric:  # zero points over the whole 0..15 range
        zp = layout.pack_zero_points(rng.integers(0, 16, size=(n, layout.n_blocks(k, bs))).astype(np.uint8))
    return b, s, zp


def _model(b, s, k, n, bs, dtype, zp=None, bias=None, level=4, lead_names=("M",)):
    attrs = {"K": k, "N": n, "block_size": bs, "accuracy_level": level}
    return int4_model(
        b, s, k, n, bs, dtype=dtype, zero_points=zp, bias=bias, x_shape=list(lead_names) + [None], attrs=attrs
    )


def case(rng, k, n, bs, dtype, symmetric, with_bias, lead=(7,)):
    """One run against the reference; returns (y, y at accuracy_level 0) for further checks."""
    b, s, zp = _weights(rng, k, n, bs, symmetric)
    s = s.astype(np_dtype(dtype))
    bias = rng.standard_normal(n).astype(np_dtype(dtype)) if with_bias else None
    x = (rng.standard_normal((*lead, k)) * rng.uniform(0.1, 10.0, size=(*lead, 1))).astype(np_dtype(dtype))
    names = [f"d{i}" for i in range(len(lead))]
    y = run(_model(b, s, k, n, bs, dtype, zp, bias, 4, names), x)
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs, zp, bias, accuracy_level=4)
    reference.assert_within_limit(y, y_ref, mag, dtype)
    assert y.dtype == x.dtype and y.shape == (*lead, n)
    return y, run(_model(b, s, k, n, bs, dtype, zp, bias, 0, names), x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("bs", [16, 32, 128])
def test_matches_reference(rng, dtype, symmetric, with_bias, bs):
    # Scales of every dtype through each kernel: 16 / 32 load them as lanes (F16C / bf16 shift).
    case(rng, k=256, n=48, bs=bs, dtype=dtype, symmetric=symmetric, with_bias=with_bias, lead=(2, 5))


@pytest.mark.parametrize("bs", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 9])
def test_block_sizes_and_row_groups(rng, bs, m):
    # Blocks of 16 / 32 share a 64-code chunk of the AVX2 kernel; M covers its 4-row groups and the
    # 1 / 2 / 3-row remainders (4 / 2 / 1 weight rows per tile); N = 37 leaves a partial tile.
    case(rng, k=512, n=37, bs=bs, dtype="float32", symmetric=False, with_bias=True, lead=(m,))


@pytest.mark.parametrize(
    "k,bs", [(200, 64), (576, 128), (17, 16), (100, 256), (1000, 32), (48, 32), (40, 16)]
)
def test_k_not_multiple_of_block(rng, k, bs):
    # K = 48 / 40: a weight row shorter than or ending inside a 32-byte chunk (read via a padded copy).
    case(rng, k=k, n=21, bs=bs, dtype="float16", symmetric=False, with_bias=False)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize(
    "k,bs",
    [
        (288, 32),
        (576, 32),
        (352, 32),
        (4096, 32),
        (576, 64),
        (640, 64),
        (4096, 64),
        (576, 128),
        (4096, 128),
        (1000, 256),
    ],
)
@pytest.mark.parametrize("m", [1, 2, 3, 6, 7])
def test_small_m_every_block_size(rng, dtype, symmetric, k, bs, m):
    # Below the GEMM's M: on AVX512-VNNI a 64-byte chunk holds 4 / 2 blocks of 32 / 64 codes and the
    # row's last one fewer (1 / 2 / 3 blocks of 32 at K = 288 / 576 / 352, 1 block of 64 at K = 576);
    # blocks of 128 / 256 span 1 / 2 chunks (K = 576 / 1000: a padded last block).
    case(rng, k=k, n=23, bs=bs, dtype=dtype, symmetric=symmetric, with_bias=True, lead=(m,))


@pytest.mark.parametrize("bs", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("m", [12, 13, 16, 17, 18, 19, 20, 21, 23])
@pytest.mark.parametrize("symmetric", [True, False])
def test_gemm_rows(rng, bs, m, symmetric):
    # From M = 16 (AVX512-VNNI) / 12 (AVX2) the kernel whose lanes are output columns: panels of 16
    # weight rows (N = 37: a partial one), X rows in tiles of 6 / 4 and the 1..5 / 1..3-row remainders
    # (VNNI: M = 19 / 20 / 21 / 16 / 17; AVX2: 13 / 18 / 19). On VNNI M = 12 / 13 run the 512-bit tiles.
    case(rng, k=512, n=37, bs=bs, dtype="float32", symmetric=symmetric, with_bias=True, lead=(m,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,bs", [(1000, 32), (200, 64), (40, 16), (576, 128), (100, 256)])
def test_gemm_rows_k_tails_and_dtypes(rng, dtype, k, bs):
    # K not a multiple of the block (the panel covers the padded codes; X is zero there), and the
    # scale dtypes, through the column-lane kernel (M = 16).
    case(rng, k=k, n=19, bs=bs, dtype=dtype, symmetric=False, with_bias=False, lead=(2, 8))


def test_gemm_rows_non_finite_and_zero_rows(rng):
    k, n, bs = 256, 40, 64
    b, s, zp = _weights(rng, k, n, bs, symmetric=False)
    x = rng.standard_normal((16, k)).astype(np.float32)
    x[1, 40] = np.nan
    x[6, 200] = -np.inf
    x[13] = 0.0
    y = run(_model(b, s, k, n, bs, "float32", zp), x)
    assert np.isnan(y[1]).all() and np.isnan(y[6]).all()
    np.testing.assert_array_equal(y[13], np.zeros(n, np.float32))
    ok = [i for i in range(16) if i not in (1, 6)]
    y_ref, mag = reference.matmul_int4_ref(x[ok], b, s, k, n, bs, zp, accuracy_level=4)
    reference.assert_within_limit(y[ok], y_ref, mag, "float32")


def test_large_m_and_threads(rng):
    # 300 rows: many 4-row groups, and more output columns than one parallel task.
    case(rng, k=384, n=300, bs=128, dtype="float32", symmetric=True, with_bias=True, lead=(300,))


def test_really_quantizes_within_its_rounding(rng):
    # Level 4 is not level 0: X is rounded to 8 bits (relative error up to 1/254 of the block amax).
    k, n, bs = 256, 16, 64
    y4, y0 = case(rng, k=k, n=n, bs=bs, dtype="float32", symmetric=True, with_bias=False, lead=(6,))
    assert not np.array_equal(y4, y0)
    assert np.max(np.abs(y4 - y0)) < 0.05 * np.max(np.abs(y0))


def test_rounding_is_exact_half_even():
    # amax = 254 -> inv = 0.5, s_x = 2: x = 3, 5, -3, -5, 1 hit ties (1.5, 2.5, ...) that round to even
    # (2, 2, -2, -2, 0). One weight code per column picks one element, so a wrong tie shows up as an
    # error of s_x * scale = 2, far outside the limit.
    k, n, bs = 32, 6, 32
    x = np.zeros((1, k), np.float32)
    x[0, :6] = [254, 3, 5, -3, -5, 1]
    q = np.full((n, k), 8, np.uint8)  # zero weights (symmetric zero point 8)
    for j in range(n):
        q[j, j] = 9  # weight +1 on element j
    b = layout.pack_int4(q, bs)
    s = np.ones((n, 1), np.float32)
    y = run(_model(b, s, k, n, bs, "float32"), x)
    np.testing.assert_array_equal(y, [[254.0, 4.0, 4.0, -4.0, -4.0, 0.0]])


def test_codes_at_every_position(rng):
    # Each output column picks one element of X (weight +1 there, 0 elsewhere), so y = code * s_x
    # exactly: every even / odd position of a block of 40 codes (two 16-code vector steps of the
    # AVX2 quantizer, then its 8-code tail), ties included (multiples of 0.5 at s_x = 2).
    k, bs = 40, 64
    x = np.zeros((1, k), np.float32)
    x[0] = rng.integers(-500, 501, size=k) / 2.0
    x[0, 7] = 254.0  # amax -> inv = 0.5, s_x = 2
    q = np.full((k, k), 8, np.uint8)
    np.fill_diagonal(q, 9)
    b = layout.pack_int4(q, bs)
    s = np.ones((k, 1), np.float32)
    y = run(_model(b, s, k, k, bs, "float32"), x)
    codes = np.clip(np.round(x[0] * np.float32(0.5)), -127, 127)  # numpy rounds half to even
    np.testing.assert_array_equal(y[0], codes * 2.0)


def test_non_finite_and_zero_rows(rng):
    k, n, bs = 128, 24, 32
    b, s, zp = _weights(rng, k, n, bs, symmetric=False)
    bias = rng.standard_normal(n).astype(np.float32)
    x = rng.standard_normal((5, k)).astype(np.float32)
    x[1, 40] = np.nan
    x[2, 100] = np.inf
    x[3] = 0.0
    y = run(_model(b, s, k, n, bs, "float32", zp, bias), x)
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all()  # a non-finite block makes its row NaN
    np.testing.assert_array_equal(y[3], bias)  # an all-zero row: exactly the bias
    y_ref, mag = reference.matmul_int4_ref(x[[0, 4]], b, s, k, n, bs, zp, bias, accuracy_level=4)
    reference.assert_within_limit(y[[0, 4]], y_ref, mag, "float32")


def test_tiny_amax_clamps(rng):
    # amax below 127 / FLT_MAX makes inv infinite: the amax element clamps to +-127, zeros stay 0.
    k, n, bs = 64, 8, 64
    b, s, zp = _weights(rng, k, n, bs, symmetric=True)
    x = np.zeros((1, k), np.float32)
    x[0, 3], x[0, 10] = 1e-38, -1e-38
    y = run(_model(b, s, k, n, bs, "float32", zp), x)
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs, zp, accuracy_level=4)
    assert np.isfinite(y).all()
    reference.assert_within_limit(y, y_ref, mag, "float32")


@pytest.mark.parametrize("level", [1, 2, 3])
def test_levels_below_4_are_the_float_path(rng, level):
    k, n, bs = 128, 16, 32
    b, s, _ = _weights(rng, k, n, bs, symmetric=True)
    x = rng.standard_normal((3, k)).astype(np.float32)
    np.testing.assert_array_equal(
        run(_model(b, s, k, n, bs, "float32", level=level), x),
        run(_model(b, s, k, n, bs, "float32", level=0), x),
    )


@pytest.mark.parametrize("level", [-1, 5, 99])
def test_bad_accuracy_level_is_a_clear_error(rng, level):
    k, n, bs = 64, 8, 32
    b, s, _ = _weights(rng, k, n, bs, symmetric=True)
    with pytest.raises(ORT_ERRORS, match="accuracy_level"):
        run(_model(b, s, k, n, bs, "float32", level=level), np.zeros((1, k), np.float32))


def test_empty_batch(rng):
    k, n, bs = 64, 16, 32
    b, s, _ = _weights(rng, k, n, bs, symmetric=True)
    assert run(_model(b, s, k, n, bs, "float32"), np.zeros((0, k), np.float32)).shape == (0, n)
