"""ONNX export: graph structure (pyquant nodes fed by packed initializers, no float weights for the
quantized layers, dynamic dims), fallback detection, and ORT output against torch eager."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
import torch.nn as nn

from pyquant.config import Fp8Config, Int4Config, QuantizeConfig
from pyquant.export import ExportError, export, verify_onnx_model
from pyquant.modules import Int4Linear
from pyquant.quantize import quantize
from tests.pyquant.ort_session import cpu_session
from tests.pyquant.tiny_models import tiny_llama

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


class Block(nn.Module):
    def __init__(self, k: int = 96, h: int = 160, n: int = 40) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(k)
        self.up = nn.Linear(k, h)
        self.gate = nn.Linear(k, h, bias=False)
        self.down = nn.Linear(h, n)
        self.head = nn.Linear(n, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        return self.head(self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x)))


CFG = QuantizeConfig(
    default=Int4Config(32),
    exclude=["head"],
    overrides={"gate": Int4Config(64, symmetric=False), "down": Fp8Config(32, "static")},
)


def _quantized_block(dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(0)
    return quantize(Block(), CFG, calibration_data=[torch.randn(16, 96)]).to(dtype).eval()


def test_graph_structure(tmp_path) -> None:
    m = _quantized_block()
    rep = export(m, (torch.randn(2, 5, 96),), tmp_path / "m.onnx")
    proto = onnx.load(str(tmp_path / "m.onnx"))
    assert {(o.domain, o.version) for o in proto.opset_import} >= {("pyquant", 1)}
    nodes = [n for n in proto.graph.node if n.domain == "pyquant"]
    assert sorted(n.op_type for n in nodes) == ["LinearFp8", "MatMulInt4", "MatMulInt4"]
    assert rep.op_counts == {"MatMulInt4": 2, "LinearFp8": 1} == verify_onnx_model(tmp_path / "m.onnx")
    inits = {i.name: i for i in proto.graph.initializer}
    for n in nodes:  # packed weights come straight from initializers of the packed types
        want = onnx.TensorProto.UINT8 if n.op_type == "MatMulInt4" else onnx.TensorProto.FLOAT8E4M3FN
        assert inits[n.input[1]].data_type == want
    float_shapes = {tuple(i.dims) for i in inits.values() if i.data_type in FLOAT_TYPES}
    for shape in [(160, 96), (96, 160), (40, 160), (160, 40)]:  # float weights of up/gate/down: absent
        assert shape not in float_shapes
    assert (8, 40) in float_shapes or (40, 8) in float_shapes  # the excluded head stays float
    fp8 = next(n for n in nodes if n.op_type == "LinearFp8")
    assert len(fp8.input) >= 4 and fp8.input[3] in inits  # static x_scale
    gate = next(n for n in nodes if n.op_type == "MatMulInt4" and n.input[1].startswith("gate"))
    attrs = {a.name: a.i for a in gate.attribute}
    assert attrs == {"K": 96, "N": 160, "block_size": 64} and gate.input[3] in inits  # zero points
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and dims[1].dim_param and dims[2].dim_value == 96
    # file size ~ packed size: no hidden float copies
    assert rep.file_bytes < rep.initializer_bytes + 64 * 1024


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_ort_matches_torch(tmp_path, dtype: torch.dtype) -> None:
    m = _quantized_block(dtype)
    export(m, (torch.randn(2, 5, 96, dtype=dtype),), tmp_path / "m.onnx")
    # dynamic batch and sequence
    _assert_ort_matches_torch(tmp_path / "m.onnx", m, [(2, 5, 96), (1, 1, 96), (3, 17, 96)], dtype)


def _assert_ort_matches_torch(path, m: nn.Module, shapes, dtype: torch.dtype) -> None:
    """The exported file in ORT's CPU EP against the module in torch eager, on fresh inputs."""
    sess = cpu_session(path)
    for shape in shapes:
        x = torch.randn(*shape, dtype=dtype)
        y = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
        with torch.no_grad():
            ref = m(x).float().numpy()
        tol = 1e-4 if dtype == torch.float32 else 2e-2
        np.testing.assert_allclose(y.astype(np.float32), ref, atol=tol, rtol=tol)


def test_tiny_hf_llama_exports_and_runs(tmp_path) -> None:
    pytest.importorskip("transformers")
    from pyquant.models import CausalLMLogits

    model = tiny_llama(intermediate_size=160, tie_word_embeddings=True)
    quantize(
        model,
        QuantizeConfig(
            default=Int4Config(32), exclude=["lm_head"], overrides={"*.mlp.down_proj": Fp8Config(32)}
        ),
    )
    wrapped = CausalLMLogits(model)
    ids = torch.randint(0, 128, (2, 8))
    rep = export(wrapped, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, tmp_path / "llama.onnx")
    assert rep.op_counts == {"MatMulInt4": 12, "LinearFp8": 2}
    sess = cpu_session(tmp_path / "llama.onnx")
    ids = torch.randint(0, 128, (3, 11))
    mask = torch.ones_like(ids)
    y = sess.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    with torch.no_grad():
        ref = wrapped(ids, mask).numpy()
    np.testing.assert_allclose(y, ref, atol=2e-3, rtol=2e-3)


class _Unpacking(Int4Linear):
    """A broken module that dequantizes in the graph instead of calling the op."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.dequantized_weight().to(x.dtype), self.bias)


def test_float_fallback_raises(tmp_path) -> None:
    m = _quantized_block()
    m.up.__class__ = _Unpacking
    with pytest.raises(ExportError, match=r"layer .up.: up.qweight is read by"):
        export(m, (torch.randn(2, 5, 96),), tmp_path / "bad.onnx")


def test_export_input_errors(tmp_path) -> None:
    m = _quantized_block()
    with pytest.raises(ValueError, match="sizes >= 2"):
        export(m, (torch.randn(1, 5, 96),), tmp_path / "x.onnx")
    with pytest.raises(ValueError, match="nn.Module"):
        export(lambda x: x, (torch.randn(2, 5, 96),), tmp_path / "x.onnx")  # type: ignore[arg-type]


def test_external_data(tmp_path) -> None:
    m = _quantized_block()
    rep = export(m, (torch.randn(2, 5, 96),), tmp_path / "ext.onnx", external_data=True)
    assert rep.external_data and (tmp_path / "ext.onnx.data").is_file()
    sess = cpu_session(tmp_path / "ext.onnx")
    x = torch.randn(2, 3, 96)
    y = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(y, m(x).detach().numpy(), atol=1e-4, rtol=1e-4)


def _int4_attrs(proto: onnx.ModelProto, op_type: str = "MatMulInt4") -> dict[str, dict[str, int]]:
    """{B initializer's layer prefix: node attributes} of the nodes of op_type."""
    return {
        n.input[1].split(".")[0]: {a.name: a.i for a in n.attribute}
        for n in proto.graph.node
        if n.op_type == op_type
    }


def test_accuracy_level_attribute_and_matmulnbits_round_trip(tmp_path) -> None:
    """accuracy_level 4 becomes the node attribute (level 0 writes none, as before), and survives the
    conversion to com.microsoft.MatMulNBits and back (graph structure only, no ORT run)."""
    from pyquant.convert import from_matmulnbits, to_matmulnbits

    torch.manual_seed(0)
    cfg = QuantizeConfig(
        default=Int4Config(32, accuracy_level=4),
        exclude=["head"],
        overrides={"gate": Int4Config(64, symmetric=False), "down": Fp8Config(32)},
    )
    m = quantize(Block(), cfg).eval()
    rep = export(m, (torch.randn(2, 5, 96),), tmp_path / "a8.onnx")
    assert rep.op_counts == {"MatMulInt4": 2, "LinearFp8": 1}
    proto = onnx.load(str(tmp_path / "a8.onnx"))
    assert _int4_attrs(proto) == {
        "up": {"K": 96, "N": 160, "block_size": 32, "accuracy_level": 4},
        "gate": {"K": 96, "N": 160, "block_size": 64},
    }
    assert next(a for n in proto.graph.node for a in n.attribute if a.name == "accuracy_level").type == (
        onnx.AttributeProto.INT
    )
    nbits = to_matmulnbits(proto)
    got = _int4_attrs(nbits, "MatMulNBits")
    assert got["up"]["accuracy_level"] == 4 and "accuracy_level" not in got["gate"]
    assert _int4_attrs(from_matmulnbits(nbits)) == _int4_attrs(proto)
    forced = _int4_attrs(to_matmulnbits(proto, accuracy_level=0), "MatMulNBits")
    assert forced["up"]["accuracy_level"] == forced["gate"]["accuracy_level"] == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fp8_weight_only_attribute_and_ort_matches_torch(tmp_path, dtype: torch.dtype) -> None:
    """Fp8Config(activation="none") exports LinearFp8 with weight_only=1 and no x_scale; W8A8 nodes
    keep no such attribute; ORT (CPU EP) agrees with torch eager."""
    torch.manual_seed(0)
    cfg = QuantizeConfig(
        default=Fp8Config(activation="none"),
        exclude=["head"],
        overrides={"down": Fp8Config(64, "none"), "gate": Fp8Config()},
    )
    m = quantize(Block(), cfg).to(dtype).eval()
    rep = export(m, (torch.randn(2, 5, 96, dtype=dtype),), tmp_path / "wo.onnx")
    assert rep.op_counts == {"LinearFp8": 3}
    proto = onnx.load(str(tmp_path / "wo.onnx"))
    attrs = {
        n.input[1].split(".")[0]: {a.name: a.i for a in n.attribute} for n in proto.graph.node if n.domain
    }
    assert attrs == {
        "up": {"block_size": 0, "weight_only": 1},
        "down": {"block_size": 64, "weight_only": 1},
        "gate": {"block_size": 0},
    }
    for n in proto.graph.node:
        if n.domain and n.input[1].split(".")[0] != "gate":
            assert len(n.input) < 4 or not n.input[3]  # no x_scale
    _assert_ort_matches_torch(tmp_path / "wo.onnx", m, [(1, 1, 96), (3, 17, 96)], dtype)


@pytest.mark.parametrize("symmetric", [True, False])
def test_ort_int8_activations_match_reference(tmp_path, symmetric: bool) -> None:
    from pyquant import reference

    torch.manual_seed(0)
    m = quantize(nn.Sequential(nn.Linear(200, 48)), Int4Config(32, symmetric, accuracy_level=4)).eval()
    export(m, (torch.randn(2, 5, 200),), tmp_path / "a8.onnx")
    sess = cpu_session(tmp_path / "a8.onnx")
    q = m[0]
    x = torch.randn(3, 7, 200) * torch.logspace(-2, 2, 200)
    x[0, 1] = 0  # an all-zero row: exactly the bias
    y = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    zp = None if q.zero_points is None else q.zero_points.numpy()
    y_ref, mag = reference.matmul_int4_ref(
        x.numpy(),
        q.qweight.numpy(),
        q.scales.numpy(),
        200,
        48,
        32,
        zp,
        q.bias.detach().numpy(),
        accuracy_level=4,
    )
    reference.assert_within_limit(y, y_ref, mag, "float32")
    np.testing.assert_array_equal(y[0, 1], q.bias.detach().numpy())
    # the level-0 reference is further away than the limit allows: the kernel really quantizes X
    y0, mag0 = reference.matmul_int4_ref(
        x.numpy(), q.qweight.numpy(), q.scales.numpy(), 200, 48, 32, zp, q.bias.detach().numpy()
    )
    with pytest.raises(AssertionError):
        reference.assert_within_limit(y, y0, mag0, "float32")
