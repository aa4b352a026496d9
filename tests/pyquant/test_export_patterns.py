"""pyquant/export_patterns.py: RMSNorm exported in the Div form that ONNX Runtime fuses into one
SimplifiedLayerNormalization node (checked in ORT's optimized graph), the same outputs as the
torch model, variants left alone (Gemma's ``1 + weight``), and every module's forward restored."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from pyquant.config import Int4Config
from pyquant.export import export
from pyquant.export_patterns import fusable_rms_norms
from pyquant.quantize import quantize
from tests.pyquant.tiny_models import tiny_llama


def _optimized_ops(path, tmp_path) -> Counter:  # noqa: ANN001
    import pyquant.ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    pyquant.ort.make_session(path, options=so)
    return Counter(n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node)


def test_llama_rms_norms_fuse_in_ort(tmp_path) -> None:
    pytest.importorskip("transformers")
    model = quantize(tiny_llama(eager=False, intermediate_size=96), Int4Config(32))
    with fusable_rms_norms(model) as switched:
        assert switched == 5  # two per decoder layer and the final norm
    assert all("forward" not in vars(m) for m in model.modules())  # restored
    from pyquant.models.hf import CausalLMLogits

    ids = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    path = tmp_path / "lm.onnx"
    export(CausalLMLogits(model), (ids, mask), path, input_names=["input_ids", "attention_mask"])
    ops = _optimized_ops(path, tmp_path)
    assert ops["SimplifiedLayerNormalization"] == 5
    assert ops["Reciprocal"] == 0 and ops["Pow"] == 0
    import pyquant.ort

    got = pyquant.ort.make_session(path).run(
        None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    )[0]
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits.numpy()
    np.testing.assert_allclose(got, want, atol=2e-3, rtol=2e-3)


class GemmaLikeRMSNorm(nn.Module):
    """RMSNorm scaled by (1 + weight): not the form the Div rewrite reproduces."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim) * 0.1)
        self.eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).to(x.dtype)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = GemmaLikeRMSNorm(16)
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(x))


def test_other_rms_norms_keep_their_forward(tmp_path) -> None:
    model = Block()
    attributes = set(vars(model.norm))
    with fusable_rms_norms(model) as switched:
        assert switched == 0
    assert set(vars(model.norm)) == attributes  # the check leaves nothing behind
    x = torch.randn(2, 3, 16)
    path = tmp_path / "block.onnx"
    export(model, (x,), path)
    import pyquant.ort

    got = pyquant.ort.make_session(path).run(None, {"x": x.numpy()})[0]
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), atol=1e-5, rtol=1e-5)
