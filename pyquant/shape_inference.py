"""ONNX shape inference that knows the pyquant ops.

ORT learns our output shapes from the library itself (InferOutputShapeFn). The `onnx` package
cannot load that, so ``infer_shapes`` runs ``onnx.shape_inference`` and fills in our nodes'
outputs (type of X, X's dims with the last replaced by N; KVCacheWrite: its past's type and
shape), repeating until nothing changes so that shapes flow through chains of our nodes.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from pyquant.ops_spec import DOMAIN, FP8_OP, INT4_OP, KV_CACHE_WRITE_OP


def _known(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    g = model.graph
    out: dict[str, onnx.TypeProto] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type
        if t.elem_type != TensorProto.UNDEFINED and t.HasField("shape"):
            out[vi.name] = vi.type
    for init in g.initializer:
        out[init.name] = helper.make_tensor_type_proto(init.data_type, list(init.dims))
    return out


def _output_n(node: onnx.NodeProto, known: dict[str, onnx.TypeProto]) -> int | None:
    if node.op_type == INT4_OP:
        for a in node.attribute:
            if a.name == "N":
                return int(a.i)
        return None
    w = known.get(node.input[1]) if len(node.input) > 1 else None
    if (
        w is not None
        and len(w.tensor_type.shape.dim) == 2
        and w.tensor_type.shape.dim[0].HasField("dim_value")
    ):
        return int(w.tensor_type.shape.dim[0].dim_value)
    return None


def infer_shapes(model: onnx.ModelProto, max_rounds: int = 1000) -> onnx.ModelProto:
    """Returns a copy of `model` with value_info for every tensor whose shape can be inferred."""
    model = onnx.shape_inference.infer_shapes(model)
    for _ in range(max_rounds):
        known = _known(model)
        added = False
        for node in model.graph.node:
            if (
                node.domain != DOMAIN
                or node.op_type not in (INT4_OP, FP8_OP, KV_CACHE_WRITE_OP)
                or not node.output
            ):
                continue
            y = node.output[0]
            x = known.get(node.input[0])
            if y in known or x is None:
                continue
            dims = list(x.tensor_type.shape.dim)
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims]
            if shape and node.op_type != KV_CACHE_WRITE_OP:
                shape[-1] = _output_n(node, known)
            info = helper.make_tensor_value_info(y, x.tensor_type.elem_type, shape)
            outputs = [o for o in model.graph.output if o.name == y]
            if outputs:
                outputs[0].type.CopyFrom(info.type)
            else:
                model.graph.value_info.append(info)
            added = True
        if not added:
            return model
        model = onnx.shape_inference.infer_shapes(model)
    return model
