"""MatMulInt4 on the CPU EP against the float64 reference (pyquant.reference)."""

import numpy as np
import pytest

from pyquant import layout, reference
from tests.ops.graphs import int4_model, np_dtype, run

DTYPES = ["float32", "float16", "bfloat16"]


def _case(rng, k, n, bs, dtype, symmetric, with_bias, lead=(7,)):
    w = rng.standard_normal((n, k)).astype(np.float32) * rng.uniform(0.2, 2.0, size=(n, 1)).astype(np.float32)
    b, s, zp = layout.quantize_int4_rtn(w, bs, symmetric=symmetric)
    if not symmetric:
        # Make the zero points vary over the whole 0..15 range, not just RTN's typical values.
        nb = layout.n_blocks(k, bs)
        zp = layout.pack_zero_points(rng.integers(0, 16, size=(n, nb)).astype(np.uint8))
    s = s.astype(np_dtype(dtype))
    bias = rng.standard_normal(n).astype(np_dtype(dtype)) if with_bias else None
    x = rng.standard_normal((*lead, k)).astype(np_dtype(dtype))
    model = int4_model(
        b, s, k, n, bs, dtype=dtype, zero_points=zp, bias=bias, x_shape=[f"d{i}" for i in lead] + [None]
    )
    y = run(model, x)
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs, zp, bias)
    reference.assert_within_limit(y, y_ref, mag, dtype)
    assert y.dtype == x.dtype


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_reference(rng, dtype, symmetric, with_bias):
    _case(rng, k=256, n=48, bs=32, dtype=dtype, symmetric=symmetric, with_bias=with_bias, lead=(2, 5))


@pytest.mark.parametrize("bs", [16, 32, 64, 128, 256])
def test_block_sizes(rng, bs):
    _case(rng, k=512, n=33, bs=bs, dtype="float32", symmetric=False, with_bias=True)


@pytest.mark.parametrize("k,bs", [(200, 64), (576, 128), (17, 16), (100, 256), (1000, 32)])
def test_k_not_multiple_of_block(rng, k, bs):
    _case(rng, k=k, n=21, bs=bs, dtype="float16", symmetric=False, with_bias=False)


@pytest.mark.parametrize("lead", [(1,), (3,), (17,), (300,), (2, 3, 4)])
def test_leading_dims_and_m(rng, lead):
    # 300 rows crosses the CPU kernel's 256-row task boundary; 17/3 exercise partial 4-row tiles.
    _case(rng, k=128, n=70, bs=64, dtype="float32", symmetric=True, with_bias=True, lead=lead)


def test_empty_batch(rng):
    k, n, bs = 64, 16, 32
    b, s, _ = layout.quantize_int4_rtn(rng.standard_normal((n, k)), bs)
    y = run(int4_model(b, s, k, n, bs), np.zeros((0, k), np.float32))
    assert y.shape == (0, n)


def test_layout_nibble_order(rng):
    """One non-zero code at a time: the op must read exactly the element the layout doc says."""
    k, n, bs = 64, 2, 32
    for pos in [0, 1, 2, 31, 32, 33, 63]:
        q = np.full((n, k), 8, np.uint8)  # symmetric zero point 8 -> weight 0
        q[1, pos] = 9  # weight +1 at (1, pos)
        b = layout.pack_int4(q, bs)
        s = np.ones((n, layout.n_blocks(k, bs)), np.float32)
        x = np.arange(1, k + 1, dtype=np.float32)[None, :]
        y = run(int4_model(b, s, k, n, bs), x)
        assert y[0, 0] == 0 and y[0, 1] == pos + 1


def test_zero_point_nibble_order():
    k, n, bs = 96, 1, 32  # 3 blocks -> zero points in 2 bytes, last high nibble unused
    q = np.full((n, k), 5, np.uint8)
    zps = np.array([[1, 2, 3]], np.uint8)
    b = layout.pack_int4(q, bs)
    s = np.ones((n, 3), np.float32)
    x = np.zeros((3, k), np.float32)
    for blk in range(3):
        x[blk, blk * bs] = 1.0
    y = run(int4_model(b, s, k, n, bs, zero_points=layout.pack_zero_points(zps)), x)
    np.testing.assert_array_equal(y[:, 0], 5 - zps[0])


def test_edge_values(rng):
    """All-zero blocks, zero scales and NaN propagation (docs/ops.md, Numerics)."""
    k, n, bs = 128, 8, 32
    w = rng.standard_normal((n, k)).astype(np.float32)
    w[0] = 0.0  # all-zero row -> scale 0
    w[1, :bs] = 0.0  # one all-zero block
    b, s, _ = layout.quantize_int4_rtn(w, bs)
    assert s[0].max() == 0 and s[1, 0] == 0
    x = rng.standard_normal((4, k)).astype(np.float32)
    x[2, 5] = np.nan
    y = run(int4_model(b, s, k, n, bs), x)
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs)
    assert np.isnan(y[2]).all() and not np.isnan(y[[0, 1, 3]]).any()
    assert (y[[0, 1, 3], 0] == 0).all()
    reference.assert_within_limit(y, y_ref, mag, "float32")


def test_flat_scales_accepted(rng):
    k, n, bs = 128, 12, 32
    b, s, zp = layout.quantize_int4_rtn(rng.standard_normal((n, k)), bs, symmetric=False)
    x = rng.standard_normal((3, k)).astype(np.float32)
    y2d = run(int4_model(b, s, k, n, bs, zero_points=zp), x)
    y1d = run(int4_model(b, s.reshape(-1), k, n, bs, zero_points=zp.reshape(-1)), x)
    np.testing.assert_array_equal(y2d, y1d)
