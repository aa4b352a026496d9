"""ONNX export of quantized models to the ``pyquant`` ops (docs/ops.md).

``torch.onnx.export(dynamo=True)`` traces the model with torch.export; each Int4Linear / Fp8Linear
appears there as one ``pyquant::matmul_int4`` / ``pyquant::linear_fp8`` call whose inputs are the
module's packed buffers. A custom translation table maps those calls 1:1 onto ``pyquant`` domain
nodes (opset import pyquant=1), so the packed buffers become initializers that feed our nodes
directly: no unpacking subgraph exists that the exporter's optimizer could constant-fold into float
weights. ``export`` then *verifies* that (every quantized layer has its node, fed by initializers of
the packed types, and no float copy of its weight is in the file) and raises ExportError otherwise.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import onnxscript
import torch
import torch.nn as nn
from onnx.defs import OpSchema
from onnxscript.values import Op

from pyquant import torch_ops  # noqa: F401  (registers torch.ops.pyquant.*)
from pyquant.export_patterns import fusable_rms_norms
from pyquant.modules import Fp8Linear, Int4Linear, QuantizedLinear
from pyquant.ops_spec import (
    DOMAIN,
    FP8_OP,
    INT4_ATTRIBUTES,
    INT4_OP,
    INT4_REQUIRED_ATTRIBUTES,
    KV_CACHE_WRITE_OP,
    OPSET_VERSION,
)

__all__ = ["export", "ExportError", "ExportReport", "verify_onnx_model", "custom_translation_table"]

log = logging.getLogger("pyquant")

TWO_GB = 2**31


class ExportError(RuntimeError):
    """The exported graph would not run the quantized layers with the pyquant ops."""


# --- ONNX side of the two ops ------------------------------------------------------------------
# onnxscript needs an OpSchema to build a node; these describe docs/ops.md. They are passed to the
# Op objects directly and not registered in onnx's global schema registry.

_T = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"]
_FP = OpSchema.FormalParameter
_OPT = OpSchema.FormalParameterOption.Optional


def _attr(name: str, required: bool) -> OpSchema.Attribute:
    if required:
        return OpSchema.Attribute(name, OpSchema.AttrType.INT, "", required=True)
    return OpSchema.Attribute(name, OpSchema.AttrType.INT, "", required=False)


_INT4_SCHEMA = OpSchema(
    INT4_OP,
    DOMAIN,
    OPSET_VERSION,
    inputs=[
        _FP("X", "T"),
        _FP("B", "tensor(uint8)"),
        _FP("scales", "T"),
        _FP("zero_points", "tensor(uint8)", param_option=_OPT),
        _FP("bias", "T", param_option=_OPT),
    ],
    outputs=[_FP("Y", "T")],
    type_constraints=[("T", _T, "activation type")],
    attributes=[_attr(a, a in INT4_REQUIRED_ATTRIBUTES) for a in INT4_ATTRIBUTES],
)
_FP8_SCHEMA = OpSchema(
    FP8_OP,
    DOMAIN,
    OPSET_VERSION,
    inputs=[
        _FP("X", "T"),
        _FP("W", "tensor(float8e4m3fn)"),
        _FP("w_scale", "tensor(float)"),
        _FP("x_scale", "tensor(float)", param_option=_OPT),
        _FP("bias", "T", param_option=_OPT),
    ],
    outputs=[_FP("Y", "T")],
    type_constraints=[("T", _T, "activation type")],
    attributes=[_attr("block_size", False), _attr("weight_only", False)],
)
_KV_CACHE_WRITE_SCHEMA = OpSchema(
    KV_CACHE_WRITE_OP,
    DOMAIN,
    OPSET_VERSION,
    inputs=[_FP("past", "T"), _FP("new", "T"), _FP("cache_position", "tensor(int64)")],
    outputs=[_FP("present", "T")],
    type_constraints=[("T", _T, "cache type")],
)
_PQ = onnxscript.values.Opset(DOMAIN, OPSET_VERSION)
_MatMulInt4 = Op(_PQ, INT4_OP, _INT4_SCHEMA)
_LinearFp8 = Op(_PQ, FP8_OP, _FP8_SCHEMA)
_KVCacheWrite = Op(_PQ, KV_CACHE_WRITE_OP, _KV_CACHE_WRITE_SCHEMA)


def _matmul_int4_onnx(  # noqa: ANN202
    x,  # noqa: ANN001
    b,  # noqa: ANN001
    scales,  # noqa: ANN001
    zero_points=None,  # noqa: ANN001
    bias=None,  # noqa: ANN001
    K: int = 0,  # noqa: N803
    N: int = 0,  # noqa: N803
    block_size: int = 0,
    accuracy_level: int = 0,
):
    # accuracy_level is written only when it is not the default 0, so level-0 files stay as they were.
    extra = {"accuracy_level": accuracy_level} if accuracy_level != 0 else {}
    return _MatMulInt4(x, b, scales, zero_points, bias, K=K, N=N, block_size=block_size, **extra)


def _linear_fp8_onnx(  # noqa: ANN202
    x,  # noqa: ANN001
    w,  # noqa: ANN001
    w_scale,  # noqa: ANN001
    x_scale=None,  # noqa: ANN001
    bias=None,  # noqa: ANN001
    block_size: int = 0,
    weight_only: bool = False,
):
    # weight_only is written only when set, so W8A8 files stay as they were.
    extra = {"weight_only": 1} if weight_only else {}
    return _LinearFp8(x, w, w_scale, x_scale, bias, block_size=block_size, **extra)


def _kv_cache_write_onnx(past, new, cache_position):  # noqa: ANN001, ANN202
    return _KVCacheWrite(past, new, cache_position)


def custom_translation_table() -> dict[Any, Any]:
    """For ``torch.onnx.export(..., custom_translation_table=...)`` if you call it yourself."""
    return {
        torch.ops.pyquant.matmul_int4.default: _matmul_int4_onnx,
        torch.ops.pyquant.linear_fp8.default: _linear_fp8_onnx,
        torch.ops.pyquant.kv_cache_write.default: _kv_cache_write_onnx,
    }


# --- export --------------------------------------------------------------------------------------


@dataclass
class ExportReport:
    path: Path
    external_data: bool
    file_bytes: int  # .onnx plus its external data file
    packed_bytes: int  # initializers of the quantized layers
    initializer_bytes: int  # all initializers
    op_counts: dict[str, int] = field(default_factory=dict)  # pyquant op type -> nodes

    def __str__(self) -> str:
        ops = ", ".join(f"{k}={v}" for k, v in self.op_counts.items()) or "no pyquant ops"
        return (
            f"{self.path}: {self.file_bytes / 2**20:.1f} MiB on disk ({ops}; packed weights "
            f"{self.packed_bytes / 2**20:.1f} MiB of {self.initializer_bytes / 2**20:.1f} MiB initializers)"
        )


def _max_positions(model: nn.Module) -> int | None:
    """max_position_embeddings of an HF model anywhere inside ``model`` (learned position tables bound
    the sequence dim, and torch.export rejects an unbounded Dim for them)."""
    for m in model.modules():
        n = getattr(getattr(m, "config", None), "max_position_embeddings", None)
        if isinstance(n, int) and n > 2:
            return n
    return None


def _default_dynamic_shapes(example: Any, max_seq_len: int | None) -> Any:
    """Batch (dim 0) and sequence (dim 1) dynamic for every tensor input of rank >= 1 / >= 2."""
    batch = torch.export.Dim("batch")
    seq = torch.export.Dim("seq", max=max_seq_len) if max_seq_len else torch.export.Dim("seq")

    def spec(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            return None
        return {0: batch} if t.dim() == 1 else {0: batch, 1: seq}

    if isinstance(example, Mapping):
        return {k: spec(v) for k, v in example.items()}
    return tuple(spec(t) for t in example)


def export(
    model: nn.Module,
    example_inputs: tuple[Any, ...] | Mapping[str, Any],
    path: str | os.PathLike,
    *,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    dynamic_shapes: Any = "auto",
    max_seq_len: int | None = None,
    external_data: bool | None = None,
    opset_version: int | None = None,
    allow_float_fallback: bool = False,
    metadata: Mapping[str, str] | None = None,
) -> ExportReport:
    """Export ``model`` (quantized with pyquant.quantize) to ONNX at ``path`` and verify the graph.

    example_inputs: positional inputs (tuple) or keyword inputs (dict) for one forward call. Use
        batch and sequence sizes >= 2 for the dynamic dims (torch.export specializes dims of size 1).
    dynamic_shapes: "auto" -> dims 0 and 1 of every input dynamic ("batch", "seq"); None -> static;
        or a torch.export dynamic_shapes spec.
    max_seq_len: upper bound of the "seq" dim (default: the model's config.max_position_embeddings, if any).
    external_data: None -> weights go to ``<path>.data`` only when the model is over 2 GB.
    allow_float_fallback: skip the check that every quantized layer became a pyquant node (don't).
    metadata: written to the file's metadata_props (ORT: session.get_modelmeta().custom_metadata_map).
    """
    path = Path(path)
    if not isinstance(model, nn.Module):
        raise ValueError(f"export expects an nn.Module, got {type(model).__name__}")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    args, kwargs = (
        ((), dict(example_inputs)) if isinstance(example_inputs, Mapping) else (tuple(example_inputs), None)
    )
    if dynamic_shapes == "auto":
        dynamic_shapes = _default_dynamic_shapes(
            kwargs if kwargs is not None else args, max_seq_len or _max_positions(model)
        )
        for t in (kwargs or {}).values() if kwargs is not None else args:
            if isinstance(t, torch.Tensor) and any(s == 1 for s in t.shape[:2]):
                raise ValueError(
                    f"example input of shape {tuple(t.shape)}: use batch and sequence sizes >= 2 for the "
                    "dynamic dims (torch.export would specialize a dim of size 1)"
                )

    model = model.eval()
    layers = {n: m for n, m in model.named_modules() if isinstance(m, QuantizedLinear)}
    with torch.no_grad(), fusable_rms_norms(model):
        ep = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=False)
    expected = _check_exported_program(ep, layers, allow_float_fallback)
    with torch.no_grad():
        program = torch.onnx.export(
            ep,
            (),
            None,
            dynamo=True,
            input_names=input_names,
            output_names=output_names,
            custom_translation_table=custom_translation_table(),
            opset_version=opset_version,
            optimize=True,
            verbose=False,
        )
    ir_model = program.model
    ir_model.metadata_props.update(metadata or {})
    counts, packed, total = verify_ir_model(
        ir_model, expected, layers, allow_float_fallback=allow_float_fallback
    )
    if external_data is None:
        external_data = total > TWO_GB - 64 * 2**20  # protobuf's hard 2 GB limit, with headroom for the graph
    path.parent.mkdir(parents=True, exist_ok=True)
    data_path = Path(str(path) + ".data")
    if data_path.exists():
        data_path.unlink()  # a stale file from an earlier export would be misleading
    program.save(path, external_data=external_data)
    file_bytes = path.stat().st_size + (data_path.stat().st_size if data_path.exists() else 0)
    report = ExportReport(path, external_data, file_bytes, packed, total, counts)
    log.info("pyquant: exported %s", report)
    return report


_PACKED_BUFFERS = {
    Int4Linear: ("qweight", "scales", "zero_points"),
    Fp8Linear: ("weight", "w_scale", "x_scale"),
}


def _check_exported_program(
    ep: Any, layers: Mapping[str, nn.Module], allow_float_fallback: bool
) -> dict[str, int]:
    """In the torch.export graph, every packed buffer must be read by our custom ops only (anything
    else is unpacking the weight in the graph, which ONNX would get as float math or a folded float
    constant). -> {op type: number of live custom-op nodes}, the nodes the ONNX graph must have."""
    ops = {torch.ops.pyquant.matmul_int4.default: INT4_OP, torch.ops.pyquant.linear_fp8.default: FP8_OP}
    packed = {}
    for n, m in layers.items():
        for b in _PACKED_BUFFERS[Int4Linear if isinstance(m, Int4Linear) else Fp8Linear]:
            packed[f"{n}.{b}"] = n
    buf_of = dict(ep.graph_signature.inputs_to_buffers)
    problems = []
    graph = ep.graph_module.graph
    for node in graph.nodes:
        if node.op == "placeholder" and buf_of.get(node.name) in packed:
            others = sorted({str(u.target) for u in node.users if u.target not in ops})
            if others:
                problems.append(
                    f"layer {packed[buf_of[node.name]]!r}: {buf_of[node.name]} is read by {others}"
                )
    live: set[Any] = set()
    stack = [n for n in graph.nodes if n.op == "output"]
    while stack:
        n = stack.pop()
        if n not in live:
            live.add(n)
            stack.extend(n.all_input_nodes)
    counts: dict[str, int] = {}
    for n in live:
        if n.op == "call_function" and n.target in ops:
            counts[ops[n.target]] = counts.get(ops[n.target], 0) + 1
    if problems and not allow_float_fallback:
        raise ExportError(
            "quantized layers would be exported with unpacked (float) weights instead of pyquant "
            "ops:\n  " + "\n  ".join(problems)
        )
    return counts


def _dtype_name(v: Any) -> str:
    return str(v.dtype).split(".")[-1] if v.dtype is not None else "?"


_PACKED_INPUTS = {
    INT4_OP: {"B": 1, "scales": 2, "zero_points": 3},
    FP8_OP: {"W": 1, "w_scale": 2, "x_scale": 3},
}


def verify_ir_model(
    ir_model: Any,
    expected: Mapping[str, int],
    layers: Mapping[str, nn.Module],
    *,
    allow_float_fallback: bool = False,
) -> tuple[dict[str, int], int, int]:
    """Check an onnx_ir model: at least ``expected`` pyquant nodes per op type, packed inputs that are
    initializers read only by pyquant nodes, no float ``<layer>.weight`` for a quantized layer.
    -> (op counts, packed bytes, all initializer bytes)."""
    graph = ir_model.graph
    inits = dict(graph.initializers)
    total = sum(v.const_value.nbytes for v in inits.values() if v.const_value is not None)
    counts: dict[str, int] = {}
    packed = 0
    packed_names: set[str] = set()
    for node in graph.all_nodes() if hasattr(graph, "all_nodes") else graph:
        if node.domain != DOMAIN:
            continue
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
        for role, idx in _PACKED_INPUTS.get(node.op_type, {}).items():
            v = node.inputs[idx] if idx < len(node.inputs) else None
            if v is None:
                continue
            if v.name not in inits:
                raise ExportError(
                    f"{node.op_type} node {node.name!r}: input {role} is computed in the graph instead "
                    "of being a packed initializer (the weight would be re-quantized or unpacked at run time)"
                )
            if v.name not in packed_names:
                packed_names.add(v.name)
                packed += inits[v.name].const_value.nbytes
    problems = []
    for op, n in expected.items():
        if counts.get(op, 0) < n:
            problems.append(
                f"the torch graph has {n} {op} calls but only {counts.get(op, 0)} {op} nodes were exported"
            )
    # A float copy of a quantized layer's weight in the file means something unpacked it.
    for name in layers:
        v = inits.get(f"{name}.weight")
        if v is not None and _dtype_name(v) in ("FLOAT", "FLOAT16", "BFLOAT16", "DOUBLE"):
            problems.append(f"layer {name!r}: float initializer {v.name!r} {list(v.shape)}")
    for v in inits.values():
        consumers = [u.node for u in v.uses()] if hasattr(v, "uses") else []
        if v.name in packed_names and any(c.domain != DOMAIN for c in consumers):
            problems.append(
                f"packed initializer {v.name!r} is also read by non-pyquant nodes "
                f"{sorted({c.op_type for c in consumers if c.domain != DOMAIN})}"
            )
    if problems and not allow_float_fallback:
        raise ExportError(
            "the export would not run the quantized weights through pyquant ops:\n  " + "\n  ".join(problems)
        )
    opsets = dict(ir_model.opset_imports)
    if counts and opsets.get(DOMAIN) != OPSET_VERSION:
        raise ExportError(
            f"opset import for domain {DOMAIN!r} is {opsets.get(DOMAIN)}, expected {OPSET_VERSION}"
        )
    return counts, packed, total


def verify_onnx_model(model: str | os.PathLike | onnx.ModelProto) -> dict[str, int]:
    """Structure check of a saved file: pyquant nodes fed by packed initializers. -> op counts."""
    import onnx_ir as ir

    proto = (
        onnx.load(str(model), load_external_data=False) if not isinstance(model, onnx.ModelProto) else model
    )
    counts, _, _ = verify_ir_model(ir.from_proto(proto), {}, {})
    return counts
