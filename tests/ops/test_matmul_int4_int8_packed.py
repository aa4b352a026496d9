"""MatMulInt4 with int8 activations on the CPU EP with B prepacked at session creation
(Int4Int8Packed, ort_ops/cpu/int8_activations.h), against the float64 reference and the kernels
without the copy. Kept apart from test_matmul_int4_int8.py, whose tests all run both ways through
its fixture: these set PYQUANT_CPU_INT8_PACK themselves."""

import numpy as np
import pytest

from pyquant import reference
from tests.ops.graphs import np_dtype, run
from tests.ops.test_matmul_int4_int8 import DTYPES, _model, _weights


# The prepacked B (Int4Int8Packed, cpu/int8_activations.h): by default where B and its scales / zero
# points are initializers, at every M; the lane-parallel tiles / GEMM where PYQUANT_CPU_INT8_PACK=0
# or B is not constant. On CPUs without AVX2 nothing is packed and both runs below take the
# portable kernel.
def _packed_and_tiles(rng, monkeypatch, k, n, bs, dtype, symmetric, m):
    b, s, zp = _weights(rng, k, n, bs, symmetric)
    s = s.astype(np_dtype(dtype))
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10.0, size=(m, 1))).astype(np_dtype(dtype))
    model = _model(b, s, k, n, bs, dtype, zp)
    monkeypatch.delenv("PYQUANT_CPU_INT8_PACK", raising=False)
    y_packed = run(model, x)
    monkeypatch.setenv("PYQUANT_CPU_INT8_PACK", "0")
    y_tiles = run(model, x)
    monkeypatch.delenv("PYQUANT_CPU_INT8_PACK")
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs, zp, accuracy_level=4)
    for y in (y_packed, y_tiles):
        reference.assert_within_limit(y, y_ref, mag, dtype)
    return y_packed, y_tiles, (b, s, zp, x, y_ref, mag)


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 15, 16, 17, 40])
@pytest.mark.parametrize("bs", [16, 32, 64, 128, 256])
def test_packed_every_row_group_and_block_size(rng, monkeypatch, m, bs):
    # M covers the packed kernel's 8-row (VNNI) / 4-row groups and every remainder; N = 37: a partial
    # last panel (rows past N packed as zero codes with scale 0); K = 520: padded last block.
    _packed_and_tiles(rng, monkeypatch, k=520, n=37, bs=bs, dtype="float32", symmetric=m % 2 == 0, m=m)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("symmetric", [True, False])
def test_packed_scale_dtypes_and_tasks(rng, monkeypatch, dtype, symmetric):
    # N = 1000: tasks of 16-row multiples over the pool's threads (62.5 panels), scales of each dtype
    # converted once at packing; the sums agree with the tiles' up to float32 order.
    y_packed, y_tiles, _ = _packed_and_tiles(
        rng, monkeypatch, k=384, n=1000, bs=64, dtype=dtype, symmetric=symmetric, m=3
    )
    scale = np.max(np.abs(y_tiles.astype(np.float64)))
    assert np.max(np.abs(y_packed.astype(np.float64) - y_tiles.astype(np.float64))) <= 1e-2 * scale


def test_packed_non_finite_and_zero_rows(rng):
    k, n, bs = 256, 40, 64
    b, s, zp = _weights(rng, k, n, bs, symmetric=False)
    x = rng.standard_normal((6, k)).astype(np.float32)
    x[1, 40] = np.nan
    x[4, 200] = np.inf
    x[5] = 0.0
    y = run(_model(b, s, k, n, bs, "float32", zp), x)
    assert np.isnan(y[1]).all() and np.isnan(y[4]).all()
    np.testing.assert_array_equal(y[5], np.zeros(n, np.float32))
    y_ref, mag = reference.matmul_int4_ref(x[[0, 2, 3]], b, s, k, n, bs, zp, accuracy_level=4)
    reference.assert_within_limit(y[[0, 2, 3]], y_ref, mag, "float32")


def test_b_as_graph_input_is_not_packed(rng):
    # B fed at run time (not an initializer): nothing to pack at session creation; the tiles serve.
    import onnx
    from onnx import helper

    from pyquant.ort import make_session

    k, n, bs = 256, 40, 32
    b, s, zp = _weights(rng, k, n, bs, symmetric=True)
    model = _model(b, s, k, n, bs, "float32")
    init = next(i for i in model.graph.initializer if i.name == "B")
    model.graph.initializer.remove(init)
    model.graph.input.append(helper.make_tensor_value_info("B", onnx.TensorProto.UINT8, list(b.shape)))
    sess = make_session(model.SerializeToString(), providers=("cpu",))
    x = rng.standard_normal((2, k)).astype(np.float32)
    y = sess.run(None, {"X": x, "B": b})[0]
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs, None, accuracy_level=4)
    reference.assert_within_limit(y, y_ref, mag, "float32")


def test_zero_points_as_graph_input_are_honoured(rng):
    # B constant but zero points fed at run time: the packed copy (built without them) must not
    # answer; the tiles do, with the fed zero points.
    import onnx
    from onnx import helper

    from pyquant.ort import make_session

    k, n, bs = 256, 40, 32
    b, s, zp = _weights(rng, k, n, bs, symmetric=False)
    model = _model(b, s, k, n, bs, "float32", zp)
    init = next(i for i in model.graph.initializer if i.name == "zero_points")
    model.graph.initializer.remove(init)
    model.graph.input.append(
        helper.make_tensor_value_info("zero_points", onnx.TensorProto.UINT8, list(zp.shape))
    )
    sess = make_session(model.SerializeToString(), providers=("cpu",))
    for m in (1, 5, 20):
        x = rng.standard_normal((m, k)).astype(np.float32)
        y = sess.run(None, {"X": x, "zero_points": zp})[0]
        y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs, zp, accuracy_level=4)
        reference.assert_within_limit(y, y_ref, mag, "float32")
