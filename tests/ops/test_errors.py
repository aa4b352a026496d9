"""Bad models and inputs: a clear ORT error naming the node and the problem, never a crash."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pyquant import layout
from tests.ops.graphs import ORT_ERRORS, fp8_model, int4_model, run

K, N, BS = 128, 16, 32


@pytest.fixture
def int4_parts(rng):
    b, s, zp = layout.quantize_int4_rtn(rng.standard_normal((N, K)), BS, symmetric=False)
    return b, s, zp


def _expect_error(model, x, *fragments):
    with pytest.raises(ORT_ERRORS) as info:
        run(model, x)
    msg = str(info.value)
    for f in fragments:
        assert f in msg, f"expected {f!r} in error message: {msg}"
    return msg


X = np.zeros((2, K), np.float32)


@pytest.mark.parametrize(
    "attrs,fragment",
    [
        ({"N": N, "block_size": BS}, "missing required int attribute 'K'"),
        ({"K": K, "block_size": BS}, "missing required int attribute 'N'"),
        ({"K": K, "N": N}, "missing required int attribute 'block_size'"),
        ({"K": K, "N": N, "block_size": 48}, "power of two"),
        ({"K": K, "N": N, "block_size": 8}, "power of two in [16, 256]"),
        ({"K": K, "N": N, "block_size": 512}, "power of two in [16, 256]"),
        ({"K": K, "N": N, "block_size": BS, "bits": 8}, "'bits' must be 4"),
        ({"K": -1, "N": N, "block_size": BS}, "'K' must be positive"),
    ],
)
def test_int4_bad_attributes(int4_parts, attrs, fragment):
    b, s, _ = int4_parts
    model = int4_model(b, s, K, N, BS, attrs=attrs)
    _expect_error(model, X, "MatMulInt4", "int4_node", fragment)


def test_int4_wrong_k_in_x(int4_parts):
    b, s, _ = int4_parts
    model = int4_model(b, s, K, N, BS, x_shape=("M", "K"))
    _expect_error(model, np.zeros((2, K + 1), np.float32), "int4_node", "last dim 129", "K is 128")


def test_int4_bad_b_shape(int4_parts):
    b, s, _ = int4_parts
    model = int4_model(b[:, :-1], s, K, N, BS)
    _expect_error(model, X, "int4_node", "input 'B' must have shape [16, 4, 16]")


def test_int4_bad_scales_shape(int4_parts):
    b, s, _ = int4_parts
    _expect_error(int4_model(b, s[:, :2], K, N, BS), X, "input 'scales' must have shape [16, 4]")


def test_int4_bad_zero_points_shape(int4_parts):
    b, s, zp = int4_parts
    _expect_error(
        int4_model(b, s, K, N, BS, zero_points=zp[:, :1]), X, "input 'zero_points' must have shape [16, 2]"
    )


def test_int4_bad_bias_shape(int4_parts):
    b, s, _ = int4_parts
    _expect_error(
        int4_model(b, s, K, N, BS, bias=np.zeros(N + 1, np.float32)), X, "input 'bias' must have shape [16]"
    )


def test_int4_scales_type_mismatch(int4_parts):
    b, s, _ = int4_parts
    model = int4_model(b, s, K, N, BS)
    # scales float16 while X is float32: no kernel matches this type combination
    for init in model.graph.initializer:
        if init.name == "scales":
            init.CopyFrom(onnx.numpy_helper.from_array(s.astype(np.float16), "scales"))
    with pytest.raises(ORT_ERRORS, match="(?i)type|kernel|scales"):
        run(model, X)


def test_int4_x_wrong_dtype(int4_parts):
    b, s, _ = int4_parts
    model = int4_model(b, s, K, N, BS)
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    with pytest.raises(ORT_ERRORS):
        run(model, X.astype(np.float64))


def test_int4_scalar_x(int4_parts):
    b, s, _ = int4_parts
    model = int4_model(b, s, K, N, BS, x_shape=[])
    model.graph.output[0].type.tensor_type.ClearField("shape")
    _expect_error(model, np.array(1.0, np.float32), "int4_node", "rank >= 1")


def test_int4_weights_as_runtime_inputs_are_validated(int4_parts):
    """B fed at run time (not an initializer) with a wrong size: caught before any read."""
    b, s, _ = int4_parts
    model = int4_model(b, s, K, N, BS)
    g = model.graph
    init_b = [i for i in g.initializer if i.name == "B"][0]
    g.initializer.remove(init_b)
    g.input.append(helper.make_tensor_value_info("B", TensorProto.UINT8, None))
    from pyquant.ort import make_session

    sess = make_session(model.SerializeToString())
    with pytest.raises(ORT_ERRORS, match="input 'B' must have shape"):
        sess.run(None, {"X": X, "B": b[:, :2].copy()})
    y = sess.run(None, {"X": X, "B": b})[0]
    assert y.shape == (2, N)


# --- LinearFp8 --------------------------------------------------------------------------------


@pytest.fixture
def fp8_parts(rng):
    return layout.quantize_weight_fp8(rng.standard_normal((N, K)).astype(np.float32))


def test_fp8_bad_block_size(fp8_parts):
    wq, ws = fp8_parts
    _expect_error(fp8_model(wq, ws, block_size=24), X, "LinearFp8", "fp8_node", "power of two")


def test_fp8_bad_w_scale_shape(fp8_parts):
    wq, ws = fp8_parts
    _expect_error(fp8_model(wq, ws[:-1]), X, "fp8_node", "input 'w_scale' must have shape [16]")
    _expect_error(fp8_model(wq, ws, block_size=32), X, "input 'w_scale' must have shape [16, 4]")


def test_fp8_k_mismatch(fp8_parts):
    wq, ws = fp8_parts
    model = fp8_model(wq, ws, x_shape=("M", "K"))
    _expect_error(model, np.zeros((3, K - 1), np.float32), "fp8_node", "last dim 127", "K = 128")


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_fp8_bad_static_scale(fp8_parts, bad):
    wq, ws = fp8_parts
    _expect_error(fp8_model(wq, ws, x_scale=bad), X, "fp8_node", "x_scale")


def test_fp8_bad_bias(fp8_parts):
    wq, ws = fp8_parts
    _expect_error(fp8_model(wq, ws, bias=np.zeros(3, np.float32)), X, "input 'bias' must have shape [16]")


def test_fp8_weight_wrong_type(fp8_parts):
    wq, ws = fp8_parts
    model = fp8_model(wq, ws)
    for init in model.graph.initializer:
        if init.name == "W":
            init.CopyFrom(onnx.numpy_helper.from_array(wq.view(np.uint8), "W"))
    with pytest.raises(ORT_ERRORS, match="(?i)type|kernel|W"):
        run(model, X)
