"""Lossless conversion between ``pyquant::MatMulInt4`` and ORT's ``com.microsoft::MatMulNBits`` (bits=4).

    nbits = to_matmulnbits(model)              # pyquant.MatMulInt4 -> com.microsoft.MatMulNBits
    ours = from_matmulnbits(nbits)             # and back
    convert_file("in.onnx", "out.onnx", "to-matmulnbits")

The packed weight ``B`` ([N, n_blocks, block_size/2] uint8) and the packed 4-bit zero points
([N, ceil(n_blocks/2)] uint8) have the same bytes in both ops (docs/ops.md), so a conversion is a
node rewrite; weights are only touched where the two contracts differ:

* padding codes (``k >= K`` in the last block when ``K % block_size != 0``) are set to the block's
  zero point (docs/ops.md: "the converters write the zero point there"), so that an implementation
  that does not mask the tail still adds exact zeros. Already-normalized tensors are left as they are.
* ``MatMulNBits`` zero points of the float type T1 become packed uint8 when every value is an
  integer in 0..15 (otherwise the node cannot be expressed by ``MatMulInt4``).

Input order (com.microsoft.MatMulNBits v1, ORT 1.20 .. 1.31): ``A, B, scales, zero_points, g_idx,
bias``; ours is ``X, B, scales, zero_points, bias``. ``scales`` / uint8 ``zero_points`` may be 2-D
([N, n_blocks] / [N, ceil(n_blocks/2)]) or flat in both ops (ORT keeps the flat form for backward
compatibility), so by default their shape is kept, which makes ours -> nbits -> ours byte-identical.

``accuracy_level`` (same name and values in both ops: 0-3 float activations, 4 int8 activations on
the CPU EP) is carried across in both directions when it is not 0; a 0 (the default of both) is
written only when ``to_matmulnbits`` is given ``accuracy_level=0``. Levels 1-3 mean the same as 0 for
MatMulInt4 but are kept, so that ``MatMulNBits -> MatMulInt4 -> MatMulNBits`` gives the runtime back
the level it had.

Everything the converter cannot map exactly raises :class:`ConversionError` naming the node: bits != 4,
a non-trivial ``g_idx``, an ``accuracy_level`` outside 0..4, a ``block_size`` that is not a power of
two in [16, 256], float zero points that are not integers 0..15, a prepacked (EP-specific) ``B``,
unknown attributes, and weights that would have to be rewritten but are not initializers.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import onnx
from onnx import helper, numpy_helper

from pyquant import layout
from pyquant.ops_spec import DOMAIN, INT4_ACCURACY_LEVELS, INT4_ATTRIBUTES, INT4_OP, OPSET_VERSION

MS_DOMAIN = "com.microsoft"
NBITS_OP = "MatMulNBits"

Direction = Literal["to-matmulnbits", "from-matmulnbits"]
ScalesShape = Literal["keep", "2d", "flat"]

# MatMulNBits input slots (contrib schema, since_version 1).
_NB_A, _NB_B, _NB_SCALES, _NB_ZP, _NB_GIDX, _NB_BIAS = range(6)
# MatMulInt4 input slots (docs/ops.md).
_I4_X, _I4_B, _I4_SCALES, _I4_ZP, _I4_BIAS = range(5)

_NBITS_ATTRS = {"K", "N", "bits", "block_size", "accuracy_level", "weight_prepacked"}
_INT4_ATTRS = set(INT4_ATTRIBUTES)


class ConversionError(ValueError):
    """A node that cannot be converted without changing the model's numbers."""


@dataclass
class ConversionReport:
    """What a conversion did (``convert_file`` returns it; the CLI can print it)."""

    direction: str
    converted: list[str] = field(default_factory=list)  # node descriptions
    rewritten_initializers: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        s = f"{self.direction}: converted {len(self.converted)} node(s)"
        if self.rewritten_initializers:
            s += f"; rewrote initializer(s) {', '.join(self.rewritten_initializers)}"
        return s


# --- graph bookkeeping -------------------------------------------------------------------------


def _describe(node: onnx.NodeProto) -> str:
    name = node.name or "<unnamed>"
    out = node.output[0] if node.output else "?"
    return f"node '{name}' ({node.domain or 'ai.onnx'}.{node.op_type}, output '{out}')"


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for g in _subgraphs(node):
            yield from _all_nodes(g)


def _uses_domain(model: onnx.ModelProto, domains: set[str]) -> bool:
    if any(n.domain in domains for n in _all_nodes(model.graph)):
        return True
    return any(n.domain in domains for f in model.functions for n in f.node)


class _Scope:
    """Initializers visible from one graph (its own, then its enclosing graphs'), and how many
    node inputs in the whole model read each name, so that a shared tensor is copied rather than
    rewritten under another consumer's feet."""

    def __init__(self, graph: onnx.GraphProto, parent: _Scope | None, uses: dict[str, int]):
        self.graph = graph
        self.parent = parent
        self.uses = uses
        self.inits = {t.name: t for t in graph.initializer}
        self.graph_inputs = {i.name for i in graph.input}

    def declared_type(self, name: str) -> int | None:
        """Element type declared for a non-initializer value (graph input / value_info), if any."""
        s: _Scope | None = self
        while s is not None:
            for vi in (*s.graph.input, *s.graph.value_info, *s.graph.output):
                if vi.name == name and vi.type.HasField("tensor_type"):
                    return int(vi.type.tensor_type.elem_type) or None
            s = s.parent
        return None

    def find(self, name: str) -> tuple[onnx.TensorProto | None, _Scope | None]:
        s: _Scope | None = self
        while s is not None:
            if name in s.graph_inputs:  # an overridable (non-constant) initializer, or an input
                return None, None
            if name in s.inits:
                return s.inits[name], s
            s = s.parent
        return None, None


def _count_uses(graph: onnx.GraphProto, uses: dict[str, int]) -> None:
    for node in graph.node:
        for i in node.input:
            if i:
                uses[i] = uses.get(i, 0) + 1
        for g in _subgraphs(node):
            _count_uses(g, uses)
    for o in graph.output:
        uses[o.name] = uses.get(o.name, 0) + 1


def _unique_name(base: str, taken: set[str]) -> str:
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def _all_names(model: onnx.ModelProto) -> set[str]:
    names: set[str] = set()

    def walk(g: onnx.GraphProto) -> None:
        names.update(t.name for t in g.initializer)
        names.update(v.name for v in (*g.input, *g.output, *g.value_info))
        for n in g.node:
            names.update(n.input)
            names.update(n.output)
            for sg in _subgraphs(n):
                walk(sg)

    walk(model.graph)
    return names


class _Rewriter:
    def __init__(self, model: onnx.ModelProto, report: ConversionReport):
        self.model = model
        self.report = report
        self.names = _all_names(model)
        self.uses: dict[str, int] = {}
        _count_uses(model.graph, self.uses)

    def get_array(self, scope: _Scope, name: str) -> np.ndarray | None:
        t, _ = scope.find(name)
        if t is None:
            return None
        if t.data_location == onnx.TensorProto.EXTERNAL and not t.raw_data:
            raise ConversionError(
                f"initializer '{name}' is stored as external data that was not loaded; load the model "
                "with onnx.load(..., load_external_data=True) (convert_file does)"
            )
        return numpy_helper.to_array(t)

    def replace(self, scope: _Scope, node: onnx.NodeProto, slot: int, array: np.ndarray, suffix: str) -> None:
        """Gives node input `slot` the value `array`: in place when this node is the tensor's only
        reader (keeping its name), else as a new initializer next to the old one."""
        name = node.input[slot]
        t, owner = scope.find(name)
        assert t is not None and owner is not None
        new = numpy_helper.from_array(np.ascontiguousarray(array))
        if self.uses.get(name, 0) <= 1:
            new.name = name
            t.CopyFrom(new)
            # A value_info entry for the old type/shape would now contradict the tensor.
            for vi in list(owner.graph.value_info):
                if vi.name == name:
                    owner.graph.value_info.remove(vi)
            self.report.rewritten_initializers.append(name)
        else:
            new.name = _unique_name(f"{name}_{suffix}", self.names)
            owner.graph.initializer.append(new)
            owner.inits[new.name] = owner.graph.initializer[-1]
            self.uses[name] -= 1
            self.uses[new.name] = 1
            node.input[slot] = new.name
            self.report.rewritten_initializers.append(new.name)


def _input(node: onnx.NodeProto, slot: int) -> str:
    return node.input[slot] if len(node.input) > slot else ""


def _int_attrs(node: onnx.NodeProto, allowed: set[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for a in node.attribute:
        if a.name not in allowed:
            raise ConversionError(
                f"{_describe(node)}: unknown attribute '{a.name}'; refusing to guess its meaning"
            )
        if a.type != onnx.AttributeProto.INT:
            raise ConversionError(f"{_describe(node)}: attribute '{a.name}' must be an int")
        out[a.name] = int(a.i)
    for req in ("K", "N", "block_size"):
        if req not in out:
            raise ConversionError(f"{_describe(node)}: missing required attribute '{req}'")
    if out.get("bits", 4) != 4:
        raise ConversionError(f"{_describe(node)}: bits={out['bits']}; only 4-bit weights can be converted")
    bs = out["block_size"]
    if not (layout.INT4_MIN_BLOCK <= bs <= layout.INT4_MAX_BLOCK and bs & (bs - 1) == 0):
        raise ConversionError(
            f"{_describe(node)}: block_size={bs}; MatMulInt4 needs a power of two in "
            f"[{layout.INT4_MIN_BLOCK}, {layout.INT4_MAX_BLOCK}]"
        )
    if out["K"] <= 0 or out["N"] <= 0:
        raise ConversionError(f"{_describe(node)}: K and N must be positive (K={out['K']}, N={out['N']})")
    if out.get("accuracy_level", 0) not in INT4_ACCURACY_LEVELS:
        raise ConversionError(
            f"{_describe(node)}: accuracy_level={out['accuracy_level']}; both ops define only 0..4"
        )
    return out


def _check_b(node: onnx.NodeProto, b: np.ndarray | None, k: int, n: int, bs: int) -> None:
    if b is None:
        return
    want = (n, layout.n_blocks(k, bs), bs // 2)
    if b.dtype != np.uint8 or tuple(b.shape) != want:
        raise ConversionError(
            f"{_describe(node)}: B must be uint8 {list(want)} for K={k}, N={n}, block_size={bs}; "
            f"got {b.dtype} {list(b.shape)}"
        )


def _normalize_padding(
    rw: _Rewriter,
    scope: _Scope,
    node: onnx.NodeProto,
    k: int,
    n: int,
    bs: int,
    zp_packed: np.ndarray | None,
) -> None:
    """Sets the codes at k >= K in the last block to that block's zero point (see module doc)."""
    if k % bs == 0:
        return
    b = rw.get_array(scope, node.input[1])
    if b is None:
        raise ConversionError(
            f"{_describe(node)}: K={k} is not a multiple of block_size={bs}, so the padding codes of B "
            f"must be normalized, but B ('{node.input[1]}') is not a constant initializer"
        )
    _check_b(node, b, k, n, bs)
    nb = layout.n_blocks(k, bs)
    if zp_packed is None:
        zp_last = np.full((n,), layout.INT4_SYMMETRIC_ZERO_POINT, dtype=np.uint8)
    else:
        zp_last = layout.unpack_zero_points(zp_packed.reshape(n, -1), nb)[:, nb - 1]
    last = b[:, nb - 1, :]
    codes = np.empty((n, bs), dtype=np.uint8)
    codes[:, 0::2] = last & 0xF
    codes[:, 1::2] = last >> 4
    tail = k - (nb - 1) * bs  # valid codes in the last block
    if np.all(codes[:, tail:] == zp_last[:, None]):
        return
    codes[:, tail:] = zp_last[:, None]
    b = b.copy()
    b[:, nb - 1, :] = codes[:, 0::2] | (codes[:, 1::2] << 4)
    rw.replace(scope, node, 1, b, "padnorm")


def _reshape_scales(
    rw: _Rewriter, scope: _Scope, node: onnx.NodeProto, n: int, nb: int, scales_shape: ScalesShape
) -> None:
    if scales_shape == "keep":
        return
    s = rw.get_array(scope, node.input[2])
    want = (n, nb) if scales_shape == "2d" else (n * nb,)
    if s is None:
        raise ConversionError(
            f"{_describe(node)}: scales_shape={scales_shape!r} needs scales ('{node.input[2]}') "
            "to be an initializer"
        )
    if s.size != n * nb:
        raise ConversionError(
            f"{_describe(node)}: scales has {s.size} elements, expected N*n_blocks={n * nb}"
        )
    if tuple(s.shape) != want:
        rw.replace(scope, node, 2, s.reshape(want), scales_shape)


# --- the two directions ------------------------------------------------------------------------


def _convert_int4_node(
    rw: _Rewriter,
    scope: _Scope,
    node: onnx.NodeProto,
    accuracy_level: int | None,
    scales_shape: ScalesShape,
    split_bias: bool,
) -> list[onnx.NodeProto]:
    attrs = _int_attrs(node, _INT4_ATTRS)
    k, n, bs = attrs["K"], attrs["N"], attrs["block_size"]
    if len(node.input) > 5:
        raise ConversionError(f"{_describe(node)}: MatMulInt4 takes at most 5 inputs, got {len(node.input)}")
    zp_name = _input(node, _I4_ZP)
    zp = rw.get_array(scope, zp_name) if zp_name else None
    if zp_name and zp is None and k % bs:
        raise ConversionError(
            f"{_describe(node)}: zero_points ('{zp_name}') is not a constant initializer, so the padding "
            "of B cannot be normalized"
        )
    _normalize_padding(rw, scope, node, k, n, bs, zp)
    _reshape_scales(rw, scope, node, n, layout.n_blocks(k, bs), scales_shape)
    bias = _input(node, _I4_BIAS)
    inputs = [node.input[_I4_X], node.input[_I4_B], node.input[_I4_SCALES], zp_name, ""]
    new_attrs: dict[str, int] = {"K": k, "N": n, "bits": 4, "block_size": bs}
    level = attrs.get("accuracy_level", 0) if accuracy_level is None else accuracy_level
    if level != 0 or accuracy_level is not None:
        new_attrs["accuracy_level"] = level
    out_nodes: list[onnx.NodeProto] = []
    if bias and split_bias:
        # For runtimes whose MatMulNBits kernel has no bias input: Y = MatMulNBits(...) + bias.
        # (That rounds twice to T for fp16/bf16, so it is opt-in.)
        mid = _unique_name(f"{node.output[0]}_nobias", rw.names)
        mm = helper.make_node(NBITS_OP, _trim(inputs), [mid], name=node.name, domain=MS_DOMAIN, **new_attrs)
        add_name = f"{node.name or node.output[0]}_bias"
        add = helper.make_node("Add", [mid, bias], [node.output[0]], name=add_name)
        out_nodes = [mm, add]
    else:
        inputs.append(bias)
        mm = helper.make_node(
            NBITS_OP, _trim(inputs), list(node.output), name=node.name, domain=MS_DOMAIN, **new_attrs
        )
        out_nodes = [mm]
    _copy_node_extras(node, mm)
    return out_nodes


def _convert_nbits_node(rw: _Rewriter, scope: _Scope, node: onnx.NodeProto) -> list[onnx.NodeProto]:
    attrs = _int_attrs(node, _NBITS_ATTRS)
    if attrs.get("weight_prepacked", 0) != 0:
        raise ConversionError(
            f"{_describe(node)}: weight_prepacked={attrs['weight_prepacked']} (B is in an EP-specific layout)"
        )
    k, n, bs = attrs["K"], attrs["N"], attrs["block_size"]
    nb = layout.n_blocks(k, bs)
    if len(node.input) > 6:
        raise ConversionError(f"{_describe(node)}: MatMulNBits takes at most 6 inputs, got {len(node.input)}")
    _check_b(node, rw.get_array(scope, node.input[_NB_B]), k, n, bs)

    g_idx = _input(node, _NB_GIDX)
    if g_idx:
        # A g_idx that maps every k to its own block (k // block_size) is the identity; anything else
        # (act-order GPTQ) is a permutation MatMulInt4 does not have.
        g = rw.get_array(scope, g_idx)
        trivial = g is not None and g.ndim == 1 and np.array_equal(g, np.arange(g.size) // bs)
        if not trivial:
            raise ConversionError(
                f"{_describe(node)}: g_idx ('{g_idx}') is present and not the identity k // block_size; "
                "MatMulInt4 has no group index"
            )

    zp_name = _input(node, _NB_ZP)
    zp_packed: np.ndarray | None = None
    if zp_name:
        zp = rw.get_array(scope, zp_name)
        zp_t, _ = scope.find(zp_name)
        if zp is None:
            # Not a constant: fine if it is uint8 (ours reads it at run time like ORT does), but a
            # float one cannot be checked for integrality, and the padding cannot be normalized.
            declared = scope.declared_type(zp_name)
            if declared not in (None, onnx.TensorProto.UINT8):
                raise ConversionError(
                    f"{_describe(node)}: zero_points ('{zp_name}') is a non-constant "
                    f"{onnx.TensorProto.DataType.Name(declared)} tensor; only uint8 (packed 4-bit) zero "
                    "points can be converted unless they are initializers holding integers 0..15"
                )
            if k % bs:
                raise ConversionError(
                    f"{_describe(node)}: zero_points ('{zp_name}') is not a constant initializer, so the "
                    "padding of B cannot be normalized"
                )
        elif zp.dtype == np.uint8:
            zp_packed = zp
        else:
            ok = zp.size == n * nb and np.all(np.isfinite(zp)) and np.all(zp == np.round(zp))
            ok = ok and bool(np.all((zp >= 0) & (zp <= 15)))
            if not ok:
                raise ConversionError(
                    f"{_describe(node)}: zero_points ('{zp_name}') has float type "
                    f"{onnx.TensorProto.DataType.Name(zp_t.data_type) if zp_t else zp.dtype} and values "
                    "that are not all integers in 0..15; MatMulInt4 only has 4-bit integer zero points"
                )
            zp_packed = layout.pack_zero_points(zp.reshape(n, nb).astype(np.uint8))
            rw.replace(scope, node, _NB_ZP, zp_packed, "u4")
            zp_name = node.input[_NB_ZP]

    _normalize_padding(rw, scope, node, k, n, bs, zp_packed)
    inputs = [node.input[_NB_A], node.input[_NB_B], node.input[_NB_SCALES], zp_name, _input(node, _NB_BIAS)]
    new_attrs = {"K": k, "N": n, "block_size": bs}
    if attrs.get("accuracy_level", 0) != 0:  # 0 is MatMulInt4's default: not written
        new_attrs["accuracy_level"] = attrs["accuracy_level"]
    new = helper.make_node(
        INT4_OP, _trim(inputs), list(node.output), name=node.name, domain=DOMAIN, **new_attrs
    )
    _copy_node_extras(node, new)
    return [new]


def _copy_node_extras(old: onnx.NodeProto, new: onnx.NodeProto) -> None:
    """Keeps what a node carries besides its op: doc string and (onnx >= 1.16) metadata."""
    if old.HasField("doc_string"):
        new.doc_string = old.doc_string
    if hasattr(old, "metadata_props"):
        new.metadata_props.extend(old.metadata_props)


def _trim(inputs: list[str]) -> list[str]:
    while inputs and not inputs[-1]:
        inputs.pop()
    return inputs


def _walk_and_convert(rw: _Rewriter, graph: onnx.GraphProto, parent: _Scope | None, convert) -> None:
    scope = _Scope(graph, parent, rw.uses)
    new_nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        for g in _subgraphs(node):
            _walk_and_convert(rw, g, scope, convert)
        replaced = convert(scope, node)
        if replaced is None:
            new_nodes.append(node)
        else:
            rw.report.converted.append(_describe(node))
            new_nodes.extend(replaced)
    del graph.node[:]
    graph.node.extend(new_nodes)


def _set_opsets(model: onnx.ModelProto, add: str, drop: str) -> None:
    imports = {o.domain: o for o in model.opset_import}
    if add not in imports and _uses_domain(model, {add}):
        model.opset_import.append(helper.make_opsetid(add, 1 if add == MS_DOMAIN else OPSET_VERSION))
    if drop in imports and not _uses_domain(model, {drop}):
        model.opset_import.remove(imports[drop])


def _load(model: onnx.ModelProto | str | os.PathLike) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return copy.deepcopy(model)
    return onnx.load(os.fspath(model), load_external_data=True)


def to_matmulnbits(
    model: onnx.ModelProto | str | os.PathLike,
    *,
    accuracy_level: int | None = None,
    scales_shape: ScalesShape = "keep",
    split_bias: bool = False,
    report: ConversionReport | None = None,
) -> onnx.ModelProto:
    """Returns a copy of `model` with every ``pyquant.MatMulInt4`` node as ``com.microsoft.MatMulNBits``.

    accuracy_level: None (default) -> each MatMulNBits node gets its MatMulInt4 node's accuracy_level
        (omitted when that is 0 or absent); 0..4 -> written to every MatMulNBits node, overriding the
        nodes' own. 4 = int8 activations on ORT's CPU EP (not lossless numerically, but a property of
        the runtime, not of the weights; MatMulInt4 at 4 has the same contract).
    scales_shape: "keep" (default; byte-identical round trips), "2d" ([N, n_blocks], the form ORT 1.31
        documents) or "flat" ([N * n_blocks], what older ORT exporters wrote).
    split_bias: emit ``MatMulNBits + Add`` instead of the bias input (slot 5), for runtimes whose
        MatMulNBits kernel lacks bias support.
    """
    if scales_shape not in ("keep", "2d", "flat"):
        raise ValueError(f"scales_shape must be 'keep', '2d' or 'flat', got {scales_shape!r}")
    if accuracy_level is not None and (
        isinstance(accuracy_level, bool) or accuracy_level not in INT4_ACCURACY_LEVELS
    ):
        raise ValueError(
            f"accuracy_level must be None or one of {INT4_ACCURACY_LEVELS}, got {accuracy_level!r}"
        )
    m = _load(model)
    rep = report if report is not None else ConversionReport("to-matmulnbits")
    rw = _Rewriter(m, rep)

    def convert(scope: _Scope, node: onnx.NodeProto):
        if node.domain == DOMAIN and node.op_type == INT4_OP:
            return _convert_int4_node(rw, scope, node, accuracy_level, scales_shape, split_bias)
        return None

    _walk_and_convert(rw, m.graph, None, convert)
    _set_opsets(m, add=MS_DOMAIN, drop=DOMAIN)
    return m


def from_matmulnbits(
    model: onnx.ModelProto | str | os.PathLike, *, report: ConversionReport | None = None
) -> onnx.ModelProto:
    """Returns a copy of `model` with every ``com.microsoft.MatMulNBits`` node as ``pyquant.MatMulInt4``.

    ``accuracy_level`` is kept when it is not 0 (MatMulInt4 has the attribute with MatMulNBits' values):
    4 keeps the int8 activations on the CPU EP; 1-3 compute like 0 in MatMulInt4 but are kept so that
    converting back restores them.
    """
    m = _load(model)
    rep = report if report is not None else ConversionReport("from-matmulnbits")
    rw = _Rewriter(m, rep)

    def convert(scope: _Scope, node: onnx.NodeProto):
        if node.domain == MS_DOMAIN and node.op_type == NBITS_OP:
            return _convert_nbits_node(rw, scope, node)
        return None

    _walk_and_convert(rw, m.graph, None, convert)
    _set_opsets(m, add=DOMAIN, drop=MS_DOMAIN)
    return m


_DIRECTIONS = {
    "to-matmulnbits": "to",
    "to_matmulnbits": "to",
    "to-nbits": "to",
    "matmulnbits": "to",
    "from-matmulnbits": "from",
    "from_matmulnbits": "from",
    "from-nbits": "from",
    "pyquant": "from",
}


def convert_file(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    direction: str,
    *,
    accuracy_level: int | None = None,
    external_data: bool | None = None,
) -> ConversionReport:
    """Converts the model file `src` into `dst` (the ``pyquant convert`` CLI calls this).

    direction: "to-matmulnbits" (pyquant -> ORT) or "from-matmulnbits" (ORT -> pyquant).
    external_data: save the weights next to `dst` as ``<dst name>.data``; default: when `src` used
        external data or the model is too large for one protobuf (2 GiB).
    """
    d = _DIRECTIONS.get(direction.lower())
    if d is None:
        raise ValueError(f"direction must be 'to-matmulnbits' or 'from-matmulnbits', got {direction!r}")
    src, dst = os.fspath(src), os.fspath(dst)
    if d == "from" and accuracy_level is not None:
        raise ValueError("accuracy_level only applies to the to-matmulnbits direction")
    header = onnx.load(src, load_external_data=False)
    src_external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in header.graph.initializer)
    model = onnx.load(src, load_external_data=True)
    report = ConversionReport(f"{d}-matmulnbits")
    if d == "to":
        out = to_matmulnbits(model, accuracy_level=accuracy_level, report=report)
    else:
        out = from_matmulnbits(model, report=report)
    if external_data is None:
        try:
            too_big = out.ByteSize() >= 2**31 - 2**20
        except Exception:  # protobuf refuses to size messages over 2 GiB on some versions
            too_big = True
        external_data = src_external or too_big
    if external_data:
        onnx.save_model(
            out,
            dst,
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=os.path.basename(dst) + ".data",
            size_threshold=1024,
        )
    else:
        onnx.save_model(out, dst)
    return report


__all__ = [
    "ConversionError",
    "ConversionReport",
    "convert_file",
    "from_matmulnbits",
    "to_matmulnbits",
]
