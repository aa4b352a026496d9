"""INT4 algorithms (mse, gptq, awq, awq-gptq): error against RTN on synthetic data with known
structure, the packed layout against the real ORT op, the AWQ fold, configs, calibration batches."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import logging

import numpy as np
import pytest
import torch
import torch.nn as nn

import pyquant
from pyquant import layout
from pyquant.algorithms import CalibrationStats, get_weight_quantizer, registered_algorithms
from pyquant.awq import search_awq_scale
from pyquant.block_cache import block_stages
from pyquant.calibration_data import sentence_batches, text_batches, token_windows
from pyquant.config import Fp8Config, Int4Config, QuantizeConfig, config_from_dict
from pyquant.export import export
from pyquant.quantize import quantize
from tests.pyquant.ort_session import cpu_session
from tests.pyquant.tiny_models import tiny_llama


def _data(n: int = 48, k: int = 200, tokens: int = 1024, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Correlated activations with a few large input channels, and weights with outlier columns."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, k, generator=g) @ (torch.eye(k) + 0.15 * torch.randn(k, k, generator=g))
    x[:, :4] *= 15.0
    w = torch.randn(n, k, generator=g) * 0.05
    w[:, 7] *= 10.0
    return x, w


def _stats(x: torch.Tensor) -> CalibrationStats:
    return CalibrationStats(n_tokens=x.shape[0], abs_mean=x.abs().mean(0), hessian=x.t() @ x)


def _deq(p: pyquant.Int4Packed, k: int, bs: int) -> torch.Tensor:
    zp = None if p.zero_points is None else p.zero_points.numpy()
    return torch.from_numpy(layout.dequantize_int4(p.qweight.numpy(), p.scales.numpy(), k, bs, zp)).float()


def _run(algo: str, w: torch.Tensor, cfg: Int4Config, st: CalibrationStats | None) -> torch.Tensor:
    fn, _ = get_weight_quantizer("int4", algo)
    p = fn(w, cfg, st)
    n, k = w.shape
    nb = -(-k // cfg.block_size)
    assert p.qweight.dtype == torch.uint8 and p.qweight.shape == (n, nb, cfg.block_size // 2)
    assert p.scales.dtype == torch.float32 and p.scales.shape == (n, nb)
    if cfg.symmetric:
        assert p.zero_points is None
    else:
        assert p.zero_points.dtype == torch.uint8 and p.zero_points.shape == (n, -(-nb // 2))
    return _deq(p, k, cfg.block_size)


def test_registered() -> None:
    assert {"rtn", "mse", "gptq", "awq", "awq-gptq"} <= set(registered_algorithms()["int4"])
    assert get_weight_quantizer("int4", "mse")[1] == frozenset()  # no calibration needed
    assert get_weight_quantizer("int4", "gptq")[1] == {"hessian"}


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("bs", [16, 64, 256])
def test_mse_lower_weight_error_than_rtn(symmetric: bool, bs: int) -> None:
    x, w = _data(k=300)  # K not a multiple of any block size
    cfg = Int4Config(bs, symmetric)
    e_rtn = float((w - _run("rtn", w, cfg, None)).pow(2).sum())
    e_mse = float((w - _run("mse", w, Int4Config(bs, symmetric, "mse"), None)).pow(2).sum())
    assert e_mse < 0.97 * e_rtn, (e_mse, e_rtn)
    # activation-weighted: lower output error than RTN too
    st = _stats(x)
    wq = _run("mse", w, Int4Config(bs, symmetric, "mse"), st)
    assert (x @ (w - wq).t()).pow(2).sum() < (x @ (w - _run("rtn", w, cfg, None)).t()).pow(2).sum()
    # clip_grid 0: plain RTN range, bit-identical to rtn
    assert torch.equal(
        _run("mse", w, Int4Config(bs, symmetric, "mse", clip_grid=0), None), _run("rtn", w, cfg, None)
    )


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("bs", [32, 256])
def test_gptq_lower_output_error_than_rtn(symmetric: bool, bs: int) -> None:
    x, w = _data()
    st = _stats(x)

    def out_err(wq: torch.Tensor) -> float:
        return float((x @ (w - wq).t()).pow(2).sum())

    e_rtn = out_err(_run("rtn", w, Int4Config(bs, symmetric), None))
    e_gptq = out_err(_run("gptq", w, Int4Config(bs, symmetric, "gptq"), st))
    e_act = out_err(_run("gptq", w, Int4Config(bs, symmetric, "gptq", act_order=True), st))
    assert e_gptq < 0.5 * e_rtn and e_act < 0.5 * e_rtn, (e_rtn, e_gptq, e_act)


def test_gptq_act_order_and_dead_channels() -> None:
    x, w = _data(k=160)
    x[:, 50:60] = 0.0  # dead input channels: H_jj = 0
    st = _stats(x)
    cfg = Int4Config(32, True, "gptq", act_order=True, gptq_damp=0.05)
    wq = _run("gptq", w, cfg, st)
    assert torch.isfinite(wq).all() and torch.all(wq[:, 50:60] == 0)
    # act-order visits columns in another order, so the codes differ from natural order
    assert not torch.equal(wq, _run("gptq", w, Int4Config(32, True, "gptq"), st))


def test_awq_scale_search_lowers_output_error() -> None:
    x, w = _data()
    cfg = Int4Config(64)
    alpha, s, ratio = search_awq_scale(x.t() @ x, x.abs().mean(0), [(w, cfg)])
    assert 0 < alpha <= 1 and ratio < 0.9
    wq = _run("rtn", w * s, cfg, None) / s  # what the folded model computes: (x / s) Q(W s)^T
    e_awq = float((x @ (w - wq).t()).pow(2).sum())
    e_rtn = float((x @ (w - _run("rtn", w, cfg, None)).t()).pow(2).sum())
    assert e_awq < 0.9 * e_rtn
    # the search's proxy, taken through the Hessian, is the output error over every token of X
    assert ratio == pytest.approx(e_awq / e_rtn, rel=1e-4)


def _tiny_llama() -> nn.Module:
    m = tiny_llama(vocab_size=96, num_hidden_layers=1)
    with torch.no_grad():  # large activation channels, as real LLMs have
        m.model.layers[0].input_layernorm.weight[:3] *= 25.0
        m.model.layers[0].post_attention_layernorm.weight[10:12] *= 20.0
    return m


def test_awq_prepass_folds_and_beats_rtn() -> None:
    m = _tiny_llama()
    batches = [torch.randint(0, 96, (2, 24), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    with torch.no_grad():
        ref = torch.cat([m(b).logits for b in batches])

    def err(algo: str) -> tuple[float, nn.Module]:
        q = quantize(
            copy.deepcopy(m),
            QuantizeConfig(default=Int4Config(32, algorithm=algo), exclude=["lm_head"]),
            calibration_data=iter(batches),  # any iterable, also a one-shot iterator
        )
        with torch.no_grad():
            out = torch.cat([q(b).logits for b in batches])
        return float((out - ref).pow(2).mean()), q

    e_rtn, _ = err("rtn")
    e_awq, q = err("awq")
    assert e_awq < 0.8 * e_rtn, (e_rtn, e_awq)
    rep = q.pyquant_summary.awq
    assert rep.architecture == "llama" and len(rep.groups) == 4 and not rep.unscaled
    assert any(a > 0 for a in rep.groups.values()) and all(r <= 1.0 for r in rep.error_ratio.values())
    # the norm weights changed (1/s folded in), no extra module was added
    assert not torch.equal(q.model.layers[0].input_layernorm.weight, m.model.layers[0].input_layernorm.weight)


def test_awq_statistics_block_by_block_match_one_pass(monkeypatch) -> None:
    """A stack of blocks is calibrated one block at a time (earlier blocks replayed, each pass stopped
    after the block): the same scales as one pass over every group, with fewer block calls."""
    from pyquant import awq

    m = tiny_llama(vocab_size=96, num_hidden_layers=3)
    with torch.no_grad():
        for i, layer in enumerate(m.model.layers):
            layer.input_layernorm.weight[i : i + 3] *= 25.0
            layer.post_attention_layernorm.weight[10 + i : 12 + i] *= 20.0
    batches = [torch.randint(0, 96, (2, 24), generator=torch.Generator().manual_seed(i)) for i in range(4)]
    names = [n for n, mod in m.named_modules() if isinstance(mod, nn.Linear) and n != "lm_head"]
    configs = {n: Int4Config(32, algorithm="awq") for n in names}

    def run(one_pass: bool) -> tuple[nn.Module, awq.AwqReport, int]:
        model = copy.deepcopy(m)
        calls = [0]  # block 0 computed (not replayed): its first linear called
        model.model.layers[0].self_attn.q_proj.register_forward_pre_hook(
            lambda *_: calls.__setitem__(0, calls[0] + 1)
        )
        if one_pass:
            monkeypatch.setattr(
                importlib.import_module("pyquant.quantize"),
                "block_stages",
                lambda model, units, *a: ([(0, list(units))], None),
            )
        rep = awq.awq_model(model, batches, configs)
        monkeypatch.undo()
        return model, rep, calls[0]

    staged, rep_staged, calls_staged = run(False)
    flat, rep_flat, calls_flat = run(True)
    units = {g.name: [n for n, _ in g.linears] for g in awq.find_smooth_groups(m)[1]}
    fresh = copy.deepcopy(m)
    stages, cache = block_stages(fresh, units, batches, fresh)
    assert cache is not None and [b for b, _ in stages] == [0, 1, 2]
    assert len(rep_staged.groups) == 12 and rep_staged.groups == rep_flat.groups
    assert all(
        r == pytest.approx(rep_flat.error_ratio[g], rel=1e-4) for g, r in rep_staged.error_ratio.items()
    )
    for (n, p), (_, q) in zip(staged.named_parameters(), flat.named_parameters(), strict=True):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), n
    # block 0 computed: the recording of batch 0 (for the replay check), then once per batch in its
    # stage's pass (which keeps its output); the later stages replay it
    assert calls_flat == len(batches) and calls_staged == 1 + len(batches)
    # the folded model still computes the float function
    with torch.no_grad():
        for b in batches:
            assert torch.allclose(staged(b).logits, m(b).logits, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="calibration_data is empty"):
        awq.awq_model(copy.deepcopy(m), [], configs)


def test_awq_fallback_without_foldable_predecessor(caplog) -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 32))
    with caplog.at_level(logging.INFO, logger="pyquant"):
        q = quantize(m, Int4Config(32, algorithm="awq"), calibration_data=[torch.randn(8, 64)])
    assert set(q.pyquant_summary.awq.unscaled) == {"0", "2"}
    assert "no scale migration" in caplog.text


# Every algorithm, symmetric and asymmetric, K not a multiple of the block (300 % 256, 72 % 64, ...),
# block sizes 16..256, in one model (one export keeps the test fast).
ORT_LAYERS = [
    (300, Int4Config(256, False, "gptq", act_order=True)),
    (96, Int4Config(32, False, "mse")),
    (80, Int4Config(16, True, "gptq")),
    (72, Int4Config(64, True, "awq")),
    (64, Int4Config(64, False, "awq-gptq", act_order=True)),
    (48, Int4Config(32, True, "mse")),
]


def test_ort_op_accepts_layouts_and_matches_torch(tmp_path) -> None:
    torch.manual_seed(0)
    dims = [k for k, _ in ORT_LAYERS] + [40]
    mods: list[nn.Module] = []
    for i in range(len(ORT_LAYERS)):
        mods += [nn.Linear(dims[i], dims[i + 1], bias=i % 2 == 0), nn.GELU()]
    m = nn.Sequential(*mods).eval()
    cfg = QuantizeConfig(overrides={str(2 * i): c for i, (_, c) in enumerate(ORT_LAYERS)})
    x_cal = torch.randn(64, 300)
    x_cal[:, :3] *= 10
    q = quantize(copy.deepcopy(m), cfg, calibration_data=[x_cal[:32], x_cal[32:]])
    assert len(q.pyquant_summary.quantized) == len(ORT_LAYERS)
    export(q, (torch.randn(2, 3, 300),), tmp_path / "m.onnx")
    sess = cpu_session(tmp_path / "m.onnx")
    x = torch.randn(3, 5, 300)
    y = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        ref = q(x).numpy()
        yf = m(x).numpy()
    np.testing.assert_allclose(y, ref, atol=1e-4, rtol=1e-4)
    assert np.abs(y - yf).max() < 0.3 * np.abs(yf).max()  # still roughly the same function


def test_bad_configs() -> None:
    with pytest.raises(ValueError, match="gptq_damp"):
        Int4Config(gptq_damp=0.0)
    with pytest.raises(ValueError, match="gptq_damp"):
        Int4Config(gptq_damp=2.0)
    with pytest.raises(ValueError, match="act_order"):
        Int4Config(act_order="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="clip_grid"):
        Int4Config(clip_grid=-1)
    with pytest.raises(ValueError, match="algorithm"):
        Int4Config(algorithm="")
    m = nn.Sequential(nn.Linear(64, 32))
    w0 = m[0].weight.clone()
    with pytest.raises(ValueError, match="no int4 weight quantizer named 'nope'"):
        quantize(m, Int4Config(32, algorithm="nope"), calibration_data=[torch.randn(4, 64)])
    with pytest.raises(ValueError, match="no fp8 weight quantizer named 'awq'"):
        quantize(m, Fp8Config(algorithm="awq"), calibration_data=[torch.randn(4, 64)])
    for algo in ("gptq", "awq", "awq-gptq"):
        with pytest.raises(ValueError, match="calibration"):
            quantize(m, Int4Config(32, algorithm=algo))
    assert torch.equal(m[0].weight, w0) and isinstance(m[0], nn.Linear)  # nothing was touched
    fn, _ = get_weight_quantizer("int4", "gptq")
    with pytest.raises(ValueError, match="hessian"):
        fn(torch.randn(8, 64), Int4Config(32, algorithm="gptq"), None)
    with pytest.raises(ValueError, match="does not match in_features"):
        fn(torch.randn(8, 64), Int4Config(32, algorithm="gptq"), _stats(torch.randn(16, 32)))


def test_config_round_trip() -> None:
    cfg = QuantizeConfig(
        default=Int4Config(64, False, "gptq", gptq_damp=0.05, act_order=True, clip_grid=10),
        overrides={"a": Int4Config(algorithm="awq"), "b": None},
    )
    back = config_from_dict(cfg.to_dict())
    assert back.default == cfg.default and back.overrides == cfg.overrides
    assert "act-order" in cfg.default.describe() and "damp 0.05" in cfg.default.describe()
    old = {"default": {"block_size": 128, "symmetric": True, "algorithm": "rtn", "scheme": "int4"}}
    assert config_from_dict(old).default == Int4Config()  # configs saved before the new fields


def test_recipe_suffixes() -> None:
    from pyquant.models import get_recipe

    r = get_recipe("smollm2")
    assert r.quantize_config("int4-b128-gptq").default == Int4Config(128, algorithm="gptq")
    assert r.quantize_config("int4-b64-gptq-act").default == Int4Config(64, algorithm="gptq", act_order=True)
    assert r.quantize_config("int4-b64-awq").default == Int4Config(64, algorithm="awq")
    assert r.quantize_config("int4-b64-asym-awq-gptq").default == Int4Config(64, False, "awq-gptq")
    tuned = r.schemes["int4"]  # "int4" without a block: the recipe's tuned default, algorithm replaced
    assert r.quantize_config("int4-mse").default == Int4Config(tuned.block_size, tuned.symmetric, "mse")
    assert r.quantize_config("fp8-gptq").default.algorithm == "gptq"
    for bad, msg in [
        ("fp8-awq", "INT4 algorithms"),
        ("int4-mse-act", "-gptq only"),
        ("float-gptq", "quantized"),
    ]:
        with pytest.raises(ValueError, match=msg):
            r.quantize_config(bad)


class _CharTokenizer:
    """Stands in for an HF tokenizer: one id per character."""

    def __call__(self, text, add_special_tokens=True, **kw):  # noqa: ANN001, ANN003, ANN204
        if isinstance(text, list):
            n = min(max(len(t) for t in text), kw.get("max_length", 10**9))
            ids = torch.tensor([[ord(c) % 97 for c in t[:n]] + [0] * (n - len(t[:n])) for t in text])
            return {"input_ids": ids, "attention_mask": (ids != 0).long()}
        return {"input_ids": [ord(c) % 97 for c in text]}


def test_calibration_batches_and_quantize_progress(capsys) -> None:
    tok = _CharTokenizer()
    texts = (f"text number {i}" for i in range(1000))  # a generator: read lazily
    batches = text_batches(tok, texts, n_seqs=5, seq_len=16, batch_size=2)
    assert [b["input_ids"].shape for b in batches] == [(2, 16), (2, 16), (1, 16)]
    assert all(b["attention_mask"].sum() == b["input_ids"].numel() for b in batches)
    assert token_windows(tok, ["ab"] * 50, 2, 8)[0, :3].tolist() == [ord("a") % 97, ord("b") % 97, 10]
    with pytest.raises(ValueError, match="only"):
        text_batches(tok, ["short"], n_seqs=4, seq_len=64)
    with pytest.raises(ValueError, match="not one str"):
        token_windows(tok, "a str", 1, 4)
    sb = sentence_batches(tok, ["a", "bbb", "cc"], n_texts=3, max_len=2, batch_size=2)
    assert [b["input_ids"].shape for b in sb] == [(2, 2), (1, 2)]

    class Emb(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(97, 32)
            self.lin = nn.Linear(32, 16)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.lin(self.emb(input_ids))

    q = quantize(Emb(), Int4Config(16, algorithm="gptq"), calibration_data=batches, progress=True)
    assert "lin" in q.pyquant_summary.quantized
    err = capsys.readouterr().err
    assert "calibrating" in err and "quantizing" in err


def _outlier_llama() -> nn.Module:
    m = tiny_llama(vocab_size=96, num_hidden_layers=2)
    with torch.no_grad():
        for i, layer in enumerate(m.model.layers):
            layer.input_layernorm.weight[i : i + 3] *= 25.0
            layer.post_attention_layernorm.weight[10 + i : 12 + i] *= 20.0
    return m


def test_awq_prescale_equals_per_layer_awq_and_covers_mixed_groups() -> None:
    """QuantizeConfig.awq_prescale: with every layer INT4 it is exactly the per-layer "awq-gptq"
    (same scales, same packed weights); with groups mixing INT4, FP8 and float layers (a plan) those
    groups are still scaled, where per-layer AWQ leaves them alone; the float layers' function holds."""
    batches = [torch.randint(0, 96, (2, 24), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    per_layer = quantize(
        _outlier_llama(),
        QuantizeConfig(default=Int4Config(32, algorithm="awq-gptq"), exclude=["lm_head"]),
        calibration_data=batches,
    )
    pre = quantize(
        _outlier_llama(),
        QuantizeConfig(
            default=Int4Config(32, algorithm="gptq"), exclude=["lm_head"], awq_prescale=Int4Config(32)
        ),
        calibration_data=batches,
    )
    assert pre.pyquant_summary.awq.groups == per_layer.pyquant_summary.awq.groups
    for (n, a), (_, b) in zip(pre.named_buffers(), per_layer.named_buffers(), strict=True):
        assert torch.equal(a, b), n

    mixed = {
        "model.layers.0.self_attn.q_proj": Fp8Config(0),
        "model.layers.0.self_attn.k_proj": None,
        "model.layers.0.mlp.up_proj": Fp8Config(0),
        "*": Int4Config(32, algorithm="gptq"),
    }
    ref = _outlier_llama()
    plan_like = QuantizeConfig(default=None, exclude=["lm_head"], overrides=mixed)
    q = quantize(
        _outlier_llama(),
        dataclasses.replace(plan_like, awq_prescale=Int4Config(32)),
        calibration_data=batches,
    )
    scaled = q.pyquant_summary.awq.groups
    assert len(scaled) == len(per_layer.pyquant_summary.awq.groups) and q.pyquant_summary.awq.unscaled == {}
    # the float-kept k_proj reads the scaled norm with its columns scaled back: the same function
    ids = batches[0]
    outs = []
    for m in (ref, q):
        h = m.model.layers[0].self_attn.k_proj.register_forward_hook(lambda mod, i, o: outs.append(o))
        with torch.no_grad():
            m(ids)
        h.remove()
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-5)
    cfg = dataclasses.replace(plan_like, awq_prescale=Int4Config(64, symmetric=False))
    assert config_from_dict(cfg.to_dict()).awq_prescale == Int4Config(64, symmetric=False)
    with pytest.raises(ValueError, match="awq_prescale already scales every layer"):
        quantize(
            _outlier_llama(),
            QuantizeConfig(default=Int4Config(32, algorithm="awq-gptq"), awq_prescale=Int4Config(32)),
            calibration_data=batches,
        )
    with pytest.raises(ValueError, match="awq_prescale must be None or an Int4Config"):
        QuantizeConfig(awq_prescale=Fp8Config(0))
