"""pyquant.smooth: folding keeps the float function, smoothing reduces FP8 error on outlier channels,
and the quantize() wiring (QuantizeConfig.smoothing)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

transformers = pytest.importorskip("transformers")

from pyquant.config import Fp8Config, QuantizeConfig, config_from_dict  # noqa: E402
from pyquant.modules import Fp8Linear  # noqa: E402
from pyquant.quantize import quantize  # noqa: E402
from pyquant.smooth import find_smooth_groups, smooth_model  # noqa: E402
from tests.pyquant.tiny_models import tiny_llama  # noqa: E402


def _tiny_llama(outliers: bool = True) -> nn.Module:
    m = tiny_llama(eager=False, intermediate_size=96, head_dim=16)  # GQA: 2 query heads per kv head
    with torch.no_grad():
        for layer in m.model.layers:  # non-trivial norms, and a few outlier channels like real LLMs
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                norm.weight.uniform_(0.5, 1.5)
                if outliers:
                    norm.weight[[3, 17]] *= 60.0
            if outliers:
                layer.mlp.up_proj.weight[[5, 40]] *= 30.0
                layer.self_attn.v_proj.weight[[2, 20]] *= 30.0
    return m


def _tiny_bert() -> nn.Module:
    cfg = transformers.BertConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    m = transformers.BertModel(cfg).eval()
    with torch.no_grad():
        for layer in m.encoder.layer:
            layer.attention.self.value.bias.normal_()
            layer.attention.self.value.weight[[1, 33]] *= 30.0
    return m


def _batches(n: int = 3, length: int = 24) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        ids = torch.randint(0, 128, (2, length), generator=g)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    return out


def _out(m: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        o = m(**b)
    return o.logits if hasattr(o, "logits") else o.last_hidden_state


@pytest.mark.parametrize("alpha", [0.3, 0.5, 0.8, "auto"])
@pytest.mark.parametrize("arch", ["llama", "bert"])
def test_float_function_unchanged(arch: str, alpha: float | str) -> None:
    model = _tiny_llama() if arch == "llama" else _tiny_bert()
    ref = copy.deepcopy(model)
    calib = _batches()
    rep = smooth_model(model, calib, alpha)
    n_expected = 4 * 2 if arch == "llama" else 2
    assert rep.architecture == arch and len(rep.groups) == n_expected and rep.n_tokens == 3 * 2 * 24
    assert any(g.s_max / g.s_min > 2 for g in rep.groups)  # something actually moved
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, dict(ref.named_parameters())[n])]
    assert changed
    test = _batches(2, 20)
    for b in test:
        y0, y1 = _out(ref, b), _out(model, b)
        torch.testing.assert_close(y1, y0, rtol=1e-4, atol=1e-4 * float(y0.abs().max()))


def _fp8_error(lin: nn.Linear, x: torch.Tensor) -> float:
    q = quantize(nn.Sequential(copy.deepcopy(lin)), Fp8Config())
    assert isinstance(q[0], Fp8Linear)
    with torch.no_grad():
        return float((q(x) - lin(x)).pow(2).sum())


def _layer_inputs(model: nn.Module, names: list[str], batches: list) -> dict[str, torch.Tensor]:
    xs: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    hs = [
        model.get_submodule(n).register_forward_pre_hook(lambda m, a, n=n: xs[n].append(a[0].detach()))
        for n in names
    ]
    with torch.no_grad():
        for b in batches:
            model(**b)
    for h in hs:
        h.remove()
    return {n: torch.cat([t.reshape(-1, t.shape[-1]) for t in v]) for n, v in xs.items()}


@pytest.mark.parametrize("alpha", [0.5, "auto"])
def test_smoothing_reduces_fp8_layer_error_with_outliers(alpha: float | str) -> None:
    model = _tiny_llama(outliers=True)
    names = [
        f"model.layers.{i}.{s}"
        for i in range(2)
        for s in ("self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj")
    ]
    test = _batches(2, 20)
    before = _layer_inputs(model, names, test)
    err0 = {n: _fp8_error(model.get_submodule(n), x) for n, x in before.items()}
    smooth_model(model, _batches(), alpha)
    after = _layer_inputs(model, names, test)
    err1 = {n: _fp8_error(model.get_submodule(n), x) for n, x in after.items()}
    assert sum(err1.values()) < 0.75 * sum(err0.values()), (err0, err1)
    for n in names:  # every layer with outlier input channels gets better
        assert err1[n] < err0[n], (n, err0[n], err1[n])


def test_gqa_group_shares_scale() -> None:
    model = _tiny_llama()
    _, groups = find_smooth_groups(model)
    g = next(g for g in groups if g.name.endswith("o_proj"))
    # 4 query heads, 2 kv heads, head_dim 16: o channel h*16+d reads v row (h // 2)*16+d
    assert g.expand.tolist()[:16] == list(range(16)) and g.expand.tolist()[16:32] == list(range(16))
    assert g.expand.tolist()[32:48] == list(range(16, 32)) and g.expand.tolist()[48:] == list(range(16, 32))


def test_unsupported_architecture() -> None:
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)
    )
    with pytest.raises(ValueError, match="smoothing supports HF model types"):
        smooth_model(gpt2, [torch.zeros(1, 4, dtype=torch.long)], 0.5)
    with pytest.raises(ValueError, match="smoothing supports"):
        smooth_model(nn.Sequential(nn.Linear(4, 4)), [torch.zeros(1, 4)], 0.5)


def test_bad_alpha() -> None:
    with pytest.raises(ValueError, match="alpha"):
        smooth_model(_tiny_llama(), _batches(1), 1.5)
    with pytest.raises(ValueError, match="smoothing"):
        QuantizeConfig(default=Fp8Config(), smoothing=2.0)


def test_quantize_with_smoothing() -> None:
    model = _tiny_llama()
    ref = copy.deepcopy(model)
    cfg = QuantizeConfig(default=Fp8Config(), exclude=("lm_head", "*.mlp.down_proj"), smoothing=0.5)
    assert config_from_dict(cfg.to_dict()).smoothing == 0.5
    with pytest.raises(ValueError, match="calibration_data"):
        quantize(copy.deepcopy(model), cfg)
    quantize(model, cfg, calibration_data=iter(_batches()))  # a one-shot iterator is fine
    rep = model.pyquant_summary.smoothing
    assert rep is not None and len(rep.groups) == 3 * 2  # down_proj float: its group is not smoothed
    assert all("down_proj" in n for n in rep.skipped)
    assert isinstance(model.model.layers[0].mlp.gate_proj, Fp8Linear)
    rq = quantize(ref, QuantizeConfig(default=Fp8Config(), exclude=("lm_head", "*.mlp.down_proj")))
    b = _batches(1, 20)[0]
    y = _out(model, b)
    y_plain = _out(rq, b)
    assert torch.isfinite(y).all() and y.shape == y_plain.shape


def test_fp8_gptq_beats_rtn_on_correlated_inputs() -> None:
    torch.manual_seed(0)
    x = torch.randn(1024, 128) @ torch.randn(128, 128) * 0.3
    lin = nn.Linear(128, 64)
    with torch.no_grad():
        ref = lin(x)
    err = {}
    for algo in ("rtn", "gptq"):
        for bs in (0, 32):
            q = quantize(
                nn.Sequential(copy.deepcopy(lin)),
                Fp8Config(weight_block_size=bs, algorithm=algo),
                calibration_data=[x[:512], x[512:]],
            )
            assert isinstance(q[0], Fp8Linear) and q[0].config.algorithm == algo
            with torch.no_grad():
                err[algo, bs] = float((q(x) - ref).pow(2).mean())
    assert err["gptq", 0] < 0.9 * err["rtn", 0] and err["gptq", 32] < 0.9 * err["rtn", 32], err
