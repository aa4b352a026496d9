"""Residual-stream rotation (pyquant.rotation): the float function is unchanged, tied embeddings stay
tied, INT4 error falls on weights with outliers, and rotated models quantize, save, load and export."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyquant.config import Int4Config, QuantizeConfig, config_from_dict
from pyquant.modules import Int4Linear
from pyquant.quantize import load_quantized, quantize, save_quantized
from pyquant.rotation import RotateOutput, UnrotateInput, rotate_residual, rotation_matrix
from tests.pyquant.ort_session import cpu_session
from tests.pyquant.tiny_models import tiny_llama

transformers = pytest.importorskip("transformers")


def _llama(seed: int = 0, **config) -> torch.nn.Module:
    m = tiny_llama(seed=seed, **config)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # non-trivial norm gains and a few large weights, as in trained LLMs
        for layer in m.model.layers:
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                norm.weight.copy_(torch.rand(norm.weight.shape, generator=g) + 0.5)
                norm.weight[[3, 17]] *= 8.0
            for lin in (layer.self_attn.q_proj, layer.mlp.up_proj):
                lin.weight[:, [5, 40]] *= 12.0
        m.model.norm.weight.copy_(torch.rand(m.model.norm.weight.shape, generator=g) + 0.5)
    return m


def _ids(seed: int = 2, shape: tuple[int, int] = (2, 12)) -> torch.Tensor:
    return torch.randint(0, 128, shape, generator=torch.Generator().manual_seed(seed))


def _logits(m: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return m(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


@pytest.mark.parametrize("kind", ["hadamard", "random"])
@pytest.mark.parametrize("d", [64, 48, 96, 7])
def test_rotation_matrix_is_orthogonal_and_seeded(kind: str, d: int) -> None:
    q = rotation_matrix(d, kind, seed=3)
    assert q.shape == (d, d) and q.dtype == torch.float64
    torch.testing.assert_close(q @ q.T, torch.eye(d, dtype=torch.float64), atol=1e-12, rtol=0)
    assert torch.equal(q, rotation_matrix(d, kind, seed=3))
    assert not torch.equal(q, rotation_matrix(d, kind, seed=4))


def test_hadamard_rotation_spreads_every_channel() -> None:
    # Power-of-two part: every entry of a Sylvester block has the same magnitude 1 / sqrt(p).
    q = rotation_matrix(64, "hadamard")
    torch.testing.assert_close(q.abs(), torch.full((64, 64), 1 / 8, dtype=torch.float64))


@pytest.mark.parametrize("kind", ["hadamard", "random"])
@pytest.mark.parametrize("tied", [False, True])
def test_rotated_model_computes_the_same_function(kind: str, tied: bool) -> None:
    m = _llama(tie_word_embeddings=tied)
    ids = _ids()
    ref = _logits(m, ids)
    emb = m.model.embed_tokens.weight.detach().clone()
    q_before = m.model.layers[0].self_attn.q_proj.weight.detach().clone()
    rep = rotate_residual(m, kind, seed=1)
    assert (rep.kind, rep.seed, rep.hidden, rep.layers) == (kind, 1, 64, 2)
    assert isinstance(m.model.embed_tokens, RotateOutput) and isinstance(m.model.norm, UnrotateInput)
    torch.testing.assert_close(_logits(m, ids), ref, atol=2e-5, rtol=1e-4)
    # The embedding matrix is not rotated (the rotation runs after it), so a tied lm_head stays tied.
    assert torch.equal(m.model.embed_tokens.weight, emb)
    if tied:
        assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.inner.weight.data_ptr()
    # Norm gains are folded into the layers reading them.
    assert torch.equal(m.model.layers[0].input_layernorm.weight, torch.ones(64))
    assert not torch.allclose(m.model.layers[0].self_attn.q_proj.weight, q_before)


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _first_q_proj_output(m: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    out = []
    h = m.model.layers[0].self_attn.q_proj.register_forward_hook(lambda mod, i, o: out.append(o))
    _logits(m, ids)
    h.remove()
    return out[0]


def test_rotation_lowers_int4_error_on_weights_with_outliers() -> None:
    # Layer 0's q_proj reads the same input in all three models (the embedding's norm), and its
    # output is not rotated: the float output is the reference for both quantized ones.
    ids = _ids(shape=(4, 16))
    ref = _first_q_proj_output(_llama(), ids)
    cfg = QuantizeConfig(default=Int4Config(32), exclude=["lm_head"])
    plain = _rel_err(_first_q_proj_output(quantize(_llama(), cfg), ids), ref)
    rot = quantize(_llama(), QuantizeConfig(default=Int4Config(32), exclude=["lm_head"], rotation="hadamard"))
    assert rot.pyquant_summary.rotation.kind == "hadamard"
    rotated = _rel_err(_first_q_proj_output(rot, ids), ref)
    assert rotated < 0.5 * plain, (rotated, plain)


def test_rotation_errors() -> None:
    with pytest.raises(ValueError, match="rotation must be None"):
        QuantizeConfig(rotation="givens")
    with pytest.raises(ValueError, match="rotation_seed must be an int"):
        QuantizeConfig(rotation="random", rotation_seed=1.5)
    with pytest.raises(ValueError, match="rotation must be one of"):
        rotation_matrix(8, "givens")
    bert = transformers.BertModel(
        transformers.BertConfig(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
        )
    )
    with pytest.raises(ValueError, match="Llama-family"):
        rotate_residual(bert)
    m = _llama()
    rotate_residual(m)
    with pytest.raises(ValueError, match="already rotated"):
        rotate_residual(m)
    q = quantize(_llama(), Int4Config(32))
    with pytest.raises(ValueError, match="not a float nn.Linear"):
        rotate_residual(q)


def test_config_round_trip_keeps_rotation() -> None:
    cfg = QuantizeConfig(default=Int4Config(32), rotation="random", rotation_seed=7)
    assert config_from_dict(cfg.to_dict()) == cfg


def test_rotated_checkpoint_loads_into_a_fresh_model(tmp_path) -> None:
    cfg = QuantizeConfig(default=Int4Config(32, symmetric=False), exclude=["lm_head"], rotation="hadamard")
    q = quantize(_llama(tie_word_embeddings=True), cfg)
    save_quantized(q, tmp_path / "q.pt")
    loaded = load_quantized(_llama(seed=5, tie_word_embeddings=True), tmp_path / "q.pt")
    assert loaded.pyquant_summary.rotation.kind == "hadamard"
    assert isinstance(loaded.model.layers[1].mlp.down_proj, Int4Linear)
    ids = _ids()
    assert torch.equal(_logits(loaded, ids), _logits(q, ids))


def test_rotated_model_exports_and_matches_torch(tmp_path) -> None:
    from pyquant.export import export
    from pyquant.models import CausalLMLogits

    cfg = QuantizeConfig(default=Int4Config(32), exclude=["lm_head"], rotation="hadamard")
    wrapped = CausalLMLogits(quantize(_llama(tie_word_embeddings=True), cfg))
    ids = _ids()
    rep = export(wrapped, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, tmp_path / "r.onnx")
    assert rep.op_counts == {"MatMulInt4": 14}
    sess = cpu_session(tmp_path / "r.onnx")
    ids = _ids(seed=9, shape=(3, 11))
    mask = torch.ones_like(ids)
    y = sess.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    with torch.no_grad():
        ref = wrapped(ids, mask).numpy()
    np.testing.assert_allclose(y, ref, atol=2e-3, rtol=2e-3)
