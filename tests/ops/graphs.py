"""Single-node ONNX models of the pyquant ops, for the op tests and the benchmarks."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pyquant.ops_spec import DOMAIN, FP8_OP, INT4_OP


def _ort_errors() -> tuple[type[BaseException], ...]:
    from onnxruntime.capi import onnxruntime_pybind11_state as st

    names = [
        "Fail",
        "InvalidArgument",
        "RuntimeException",
        "InvalidGraph",
        "NotImplemented",
        "InvalidProtobuf",
    ]
    return tuple(getattr(st, n) for n in names if hasattr(st, n)) + (RuntimeError,)


# What "a clear ORT error" means in tests: one of ORT's own exception types (or the session
# helper's RuntimeError), never a Python crash of another kind.
ORT_ERRORS = _ort_errors()

ONNX_TYPE = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}


def np_dtype(name: str):
    import ml_dtypes

    return {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[name]


def _init(name: str, arr: np.ndarray, onnx_type: int | None = None) -> TensorProto:
    if onnx_type is None:
        return numpy_helper.from_array(np.ascontiguousarray(arr), name)
    # ml_dtypes arrays (bf16, fp8): raw bytes with an explicit ONNX type
    return helper.make_tensor(name, onnx_type, arr.shape, np.ascontiguousarray(arr).tobytes(), raw=True)


def _model(node, inits, x_shape, dtype, y_shape, opset_pyquant=1) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", ONNX_TYPE[dtype], x_shape)],
        [helper.make_tensor_value_info("Y", ONNX_TYPE[dtype], y_shape)],
        initializer=inits,
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, opset_pyquant)],
        ir_version=10,
    )


def int4_model(
    b: np.ndarray,
    scales: np.ndarray,
    k: int,
    n: int,
    block_size: int,
    dtype: str = "float32",
    zero_points: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    x_shape=("M", None),
    attrs: dict | None = None,
    scales_as_input: bool = False,
) -> onnx.ModelProto:
    """X -> MatMulInt4 -> Y with B / scales / zero_points / bias as initializers."""
    t = ONNX_TYPE[dtype]
    inits = [
        _init("B", b),
        _init("scales", scales.astype(np_dtype(dtype)), t if dtype == "bfloat16" else None),
    ]
    inputs = ["X", "B", "scales"]
    if zero_points is not None:
        inits.append(_init("zero_points", zero_points))
        inputs.append("zero_points")
    if bias is not None:
        if zero_points is None:
            inputs.append("")
        inits.append(_init("bias", bias.astype(np_dtype(dtype)), t if dtype == "bfloat16" else None))
        inputs.append("bias")
    a = {"K": k, "N": n, "block_size": block_size}
    if attrs is not None:
        a = attrs
    node = helper.make_node(INT4_OP, inputs, ["Y"], domain=DOMAIN, name="int4_node", **a)
    x_shape = [d if d is not None else k for d in x_shape]
    return _model(node, inits, x_shape, dtype, list(x_shape[:-1]) + [n])


def fp8_model(
    w_fp8: np.ndarray,
    w_scale: np.ndarray,
    dtype: str = "float32",
    block_size: int = 0,
    x_scale: float | None = None,
    bias: np.ndarray | None = None,
    x_shape=("M", None),
    weight_only: int | None = None,
) -> onnx.ModelProto:
    """weight_only: the attribute's value, written when not None (x_scale may still be given, to
    test the op's error)."""
    n, k = w_fp8.shape
    inits = [
        _init("W", w_fp8, TensorProto.FLOAT8E4M3FN),
        _init("w_scale", np.asarray(w_scale, dtype=np.float32)),
    ]
    inputs = ["X", "W", "w_scale"]
    if x_scale is not None:
        inits.append(_init("x_scale", np.array(x_scale, dtype=np.float32)))
        inputs.append("x_scale")
    if bias is not None:
        if x_scale is None:
            inputs.append("")
        t = ONNX_TYPE[dtype]
        inits.append(_init("bias", bias.astype(np_dtype(dtype)), t if dtype == "bfloat16" else None))
        inputs.append("bias")
    attrs = {"block_size": block_size} if block_size else {}
    if weight_only is not None:
        attrs["weight_only"] = weight_only
    node = helper.make_node(FP8_OP, inputs, ["Y"], domain=DOMAIN, name="fp8_node", **attrs)
    x_shape = [d if d is not None else k for d in x_shape]
    return _model(node, inits, x_shape, dtype, list(x_shape[:-1]) + [n])


def run(model: onnx.ModelProto | bytes, x: np.ndarray, providers=("cpu",)) -> np.ndarray:
    """Runs the model on X. bfloat16 (ml_dtypes) arrays travel as OrtValues, which numpy-facing
    ORT APIs do not accept directly."""
    from pyquant.ort import make_session

    data = model if isinstance(model, bytes) else model.SerializeToString()
    sess = make_session(data, providers=providers)
    return run_session(sess, x)


def run_session(sess, x: np.ndarray, input_name: str = "X") -> np.ndarray:
    import ml_dtypes
    import onnxruntime as ort

    if x.dtype != ml_dtypes.bfloat16:
        return sess.run(None, {input_name: x})[0]
    v = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
        x.view(np.uint16), onnx_element_type=TensorProto.BFLOAT16
    )
    out = sess.run_with_ort_values(None, {input_name: v})[0]
    return _bf16_to_numpy(out)


def _bf16_to_numpy(v) -> np.ndarray:
    import ml_dtypes

    if v.data_type() != "tensor(bfloat16)":
        return v.numpy()
    # The raw bytes of a CPU OrtValue, reinterpreted.
    import ctypes

    n = int(np.prod(v.shape()))
    buf = (ctypes.c_uint16 * n).from_address(v.data_ptr())
    return np.frombuffer(buf, dtype=np.uint16).copy().view(ml_dtypes.bfloat16).reshape(v.shape())
