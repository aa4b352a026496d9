"""Sensitivity analysis and the mixed-precision planner on a small synthetic model (CPU, seconds)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import torch.nn as nn

import pyquant
from pyquant.config import Fp8Config, Int4Config, QuantizeConfig, config_from_dict
from pyquant.planner import (
    Plan,
    Verification,
    make_plan,
    measure_sensitivity,
    parse_budget,
    resolve_candidates,
)

D = 64
SENSITIVE = "blocks.1.fc1"


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(D, 2 * D)
        self.fc2 = nn.Linear(2 * D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class Toy(nn.Module):
    """Three residual MLP blocks and a logits head (a stand-in for a decoder LM)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(D, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return 3.0 * self.head(x)


def _toy() -> Toy:
    torch.manual_seed(0)
    m = Toy().eval()
    with torch.no_grad():
        # One weight per row of the sensitive layer is 40x the others: an INT4 block scale then
        # flattens the rest of its block to zero, while FP8 (a float format) keeps them.
        w = m.get_submodule(SENSITIVE).weight
        w[:, 5] = 40.0 * w.abs().max()
        w *= 4.0
    return m


def _data(seed: int, n: int = 4) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 8, D, generator=g) for _ in range(n)]


CALIB, TEST = _data(1), _data(2)


def _out(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return m(x)


def _verifier(model: nn.Module):  # noqa: ANN202
    """Real metric for the tests: relative output MSE of the quantized model on held-out data."""
    with torch.no_grad():
        ref = [model(x) for x in TEST]
    calls = []

    def verify(qcfg: QuantizeConfig) -> Verification:
        calls.append(qcfg)
        q = pyquant.quantize(copy.deepcopy(model), qcfg)
        with torch.no_grad():
            err = sum(float(((q(x) - r) ** 2).sum()) for x, r in zip(TEST, ref, strict=True))
        den = sum(float((r**2).sum()) for r in ref)
        return Verification(err / den, {"rel_mse": err / den}, "torch")

    return verify, calls


@pytest.fixture(scope="module")
def sens():
    model = _toy()
    return model, measure_sensitivity(
        model, ["fp8", "int4-b32", "int4-b64"], CALIB, _out, proxy="mse", progress=False
    )


def test_sensitivity_finds_the_sensitive_layer(sens) -> None:
    model, s = sens
    layers = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    assert sorted(s.proxy) == sorted(layers)
    int4 = {n: s.proxy[n]["int4-b32"] for n in layers}
    assert max(int4, key=int4.get) == SENSITIVE
    assert all(s.proxy[n]["float"] == 0.0 for n in layers)
    # head has K = 64: int4-b64 applies, and sizes follow the formats
    nb = s.nbytes["head"]
    assert nb["float"] == 48 * 64 * 4 and nb["fp8"] == 48 * 64 + 48 * 4
    assert nb["int4-b64"] == 48 * 32 + 48 * 4
    # the model is left as it was
    assert not any(isinstance(m, (pyquant.Int4Linear, pyquant.Fp8Linear)) for m in model.modules())


def test_block_reuse_matches_full_forwards() -> None:
    model = _toy()
    a = measure_sensitivity(model, ["int4-b32"], CALIB[:2], _out, proxy="kl", progress=False)
    b = measure_sensitivity(
        model, ["int4-b32"], CALIB[:2], _out, proxy="kl", progress=False, reuse_blocks=False
    )
    for n in a.proxy:
        assert a.proxy[n]["int4-b32"] == pytest.approx(b.proxy[n]["int4-b32"], rel=1e-4, abs=1e-9)


def test_plan_respects_budget_and_keeps_sensitive_layer(sens, tmp_path) -> None:
    model, s = sens
    budget = 0.01
    verify, calls = _verifier(model)
    plan = make_plan(s, budget, verify, model_name="toy", max_evals=6, progress=False)
    assert plan.within_budget is True
    assert plan.verified["torch"]["degradation"] <= budget
    assert plan.layers[SENSITIVE] in ("float", "fp8")
    # it did compress: every other layer is quantized, most of them to INT4
    others = {n: c for n, c in plan.layers.items() if n != SENSITIVE}
    assert all(c != "float" for c in others.values())
    assert sum(c.startswith("int4") for c in others.values()) >= 4
    assert 0 < len(calls) <= 6
    # a tighter budget never gives a smaller verified error or more compression
    tight = make_plan(s, 0.001, _verifier(model)[0], model_name="toy", progress=False)
    assert tight.nbytes() >= plan.nbytes()
    if tight.verified:
        assert tight.verified["torch"]["degradation"] <= 0.001


def test_final_verifier_backs_off(sens) -> None:
    model, s = sens
    verify, _ = _verifier(model)

    def pessimistic(qcfg: QuantizeConfig) -> Verification:  # a "runtime" that measures 3x worse
        v = verify(qcfg)
        return Verification(3 * v.degradation, v.values, "ort")

    loose = make_plan(s, 0.01, verify, model_name="toy", progress=False)
    plan = make_plan(s, 0.01, verify, verify_final=pessimistic, model_name="toy", progress=False)
    if plan.within_budget:
        assert plan.verified.get("ort", {"degradation": 0})["degradation"] <= 0.01
    assert plan.nbytes() >= loose.nbytes()
    assert any(h["stage"] == "final" for h in plan.history)


def test_plan_round_trip(sens, tmp_path) -> None:
    model, s = sens
    plan = make_plan(s, 0.01, _verifier(model)[0], model_name="toy", progress=False)
    path = tmp_path / "plan.json"
    plan.save(path)
    d = json.loads(path.read_text())
    assert d["format"] == "pyquant-plan-1" and d["model"] == "toy" and d["budget"] == 0.01
    assert d["info"] is not None and set(d["candidates"]) == {"fp8", "int4-b32", "int4-b64", "float"}
    assert d["sensitivity"]["proxy"][SENSITIVE]["int4-b32"] > 0
    loaded = Plan.load(path)
    assert loaded.layers == plan.layers and loaded.budget == plan.budget
    cfg_a, cfg_b = plan.quantize_config(model), loaded.quantize_config(model)
    assert cfg_a.to_dict() == cfg_b.to_dict() == config_from_dict(d["config"]).to_dict()
    qa = pyquant.quantize(copy.deepcopy(model), cfg_a)
    qb = pyquant.quantize(copy.deepcopy(model), config_from_dict(d["config"]))
    assert set(qa.pyquant_summary.quantized) == {n for n, c in plan.layers.items() if c != "float"}
    with torch.no_grad():
        for x in TEST:
            assert torch.equal(qa(x), qb(x))


def test_bad_inputs(sens, tmp_path) -> None:
    model, s = sens
    with pytest.raises(ValueError, match="unknown candidate 'int3'"):
        resolve_candidates(["fp8", "int3"])
    with pytest.raises(ValueError, match="power of two"):
        resolve_candidates(["int4-b48"])
    with pytest.raises(ValueError, match="at least one quantized candidate"):
        resolve_candidates(["float"])
    with pytest.raises(ValueError, match=">= 0"):
        parse_budget("-1%")
    with pytest.raises(ValueError, match="not a number"):
        parse_budget("one percent")
    with pytest.raises(ValueError, match="100 %"):
        parse_budget("2")
    assert parse_budget("1%") == pytest.approx(0.01) and parse_budget(0.005) == 0.005
    with pytest.raises(ValueError, match=">= 0"):
        make_plan(s, -0.01, None, progress=False)
    with pytest.raises(ValueError, match="unknown proxy"):
        measure_sensitivity(model, ["fp8"], CALIB, _out, proxy="l2", progress=False)
    with pytest.raises(ValueError, match="not a float nn.Linear"):
        measure_sensitivity(model, ["fp8"], CALIB, _out, layers=["blocks.0"], progress=False)

    plan = make_plan(s, 0.01, None, model_name="toy", progress=False)
    assert plan.within_budget is None  # proxy only, nothing verified
    # a plan for a different model: missing layers / other shapes
    other = nn.Sequential(nn.Linear(D, D))
    with pytest.raises(ValueError, match="does not fit this model"):
        plan.quantize_config(other)
    wider = _toy()
    wider.head = nn.Linear(D, 50)
    with pytest.raises(ValueError, match="layer 'head' is \\[50, 64\\]"):
        plan.quantize_config(wider)
    # broken files
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="not a pyquant plan"):
        Plan.load(bad)
    bad.write_text("not json")
    with pytest.raises(ValueError, match="invalid JSON"):
        Plan.load(bad)
    with pytest.raises(FileNotFoundError):
        Plan.load(tmp_path / "missing.json")
    d = plan.to_dict()
    d["layers"]["head"] = "int2"
    bad.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="unknown candidates"):
        Plan.load(bad)


def test_candidates_accept_configs_and_recipe_parsers() -> None:
    c = resolve_candidates([Fp8Config(), Int4Config(64, symmetric=False), None])
    assert [x.name for x in c] == ["fp8-channel", "int4-b64-asym", "float"]

    def parse(name: str):  # noqa: ANN202 - a recipe-style parser with a scheme suffix of its own
        if name == "int4-b128-fancy":
            return Int4Config(128)
        raise ValueError("unknown scheme")

    assert resolve_candidates("int4-b128-fancy", parse)[0].config == Int4Config(128)
    # int8 activations (accuracy_level 4) are a candidate of their own, named by the scheme suffix
    c = resolve_candidates([Int4Config(128), Int4Config(128, accuracy_level=4), "int4-b64-asym-a8"])
    assert [x.name for x in c] == ["int4-b128", "int4-b128-a8", "int4-b64-asym-a8", "float"]
    assert c[2].config == Int4Config(64, symmetric=False, accuracy_level=4)


def test_calibrated_candidates_and_awq_refused() -> None:
    model = _toy()
    gptq = Int4Config(32, algorithm="gptq")
    s = measure_sensitivity(
        model, ["fp8-static", gptq, "int4-b32"], CALIB[:2], _out, proxy="mse", progress=False
    )
    name = resolve_candidates([gptq])[0].name
    for n in s.proxy:
        assert 0.0 < s.proxy[n]["fp8-static"] < 1.0
        assert 0.0 < s.proxy[n][name] < 1.0
    with pytest.raises(ValueError, match="AWQ folds its scales"):
        measure_sensitivity(model, [Int4Config(32, algorithm="awq")], CALIB[:1], _out, progress=False)


def test_calibrated_candidates_are_measured_out_of_sample() -> None:
    """A candidate that fits the calibration data (GPTQ) is measured on batches it was not fitted
    to: the proxy equals a by-hand two-fold cross-fit through pyquant.quantize (fit on the odd
    batches, measure the even ones, and the other way round), and exceeds the in-sample error
    (fc2 has 128 inputs and each fold 32 tokens: GPTQ can fit its own tokens closely)."""
    model = _toy()
    gptq = Int4Config(32, algorithm="gptq")
    name = resolve_candidates([gptq])[0].name
    batches = CALIB  # 4 batches of 2 x 8 tokens
    layer = "blocks.0.fc2"
    s = measure_sensitivity(
        model, [gptq], batches, _out, proxy="mse", layers=[layer], reuse_blocks=False, progress=False
    )
    with torch.no_grad():
        refs = [model(b) for b in batches]

    def rel_mse(fit: list[int], measure: list[int]) -> tuple[float, int]:
        """(sum, count) over positions of |out - ref|^2 / |ref|^2 (the "mse" proxy), by hand."""
        q = pyquant.quantize(
            copy.deepcopy(model),
            QuantizeConfig(default=None, overrides={layer: gptq}),
            calibration_data=[batches[i] for i in fit],
            forward_fn=lambda m, b: m(b),
        )
        total, count = 0.0, 0
        with torch.no_grad():
            for i in measure:
                e = ((q(batches[i]) - refs[i]) ** 2).sum(-1) / (refs[i] ** 2).sum(-1)
                total, count = total + float(e.sum()), count + e.numel()
        return total, count

    (s0, c0), (s1, c1) = rel_mse([1, 3], [0, 2]), rel_mse([0, 2], [1, 3])
    s_in, c_in = rel_mse([0, 1, 2, 3], [0, 1, 2, 3])
    cross = (s0 + s1) / (c0 + c1)
    assert s.proxy[layer][name] == pytest.approx(cross, rel=1e-4)
    assert s.proxy[layer][name] > s_in / c_in


def test_causal_proxy_batches_allow_cross_fitting() -> None:
    """The planner's causal-LM proxy: one sequence per batch, so that calibrated candidates are
    cross-fitted (two batches at the default 256 tokens in sequences of 128; it was one batch of
    two sequences, measured in sample)."""
    import numpy as np

    from pyquant.eval import causal_proxy_batches

    calib = np.arange(3 * 300).reshape(3, 300)
    batches = causal_proxy_batches(calib, 128, 256)
    assert [b.shape for b in batches] == [torch.Size([1, 128])] * 2
    assert torch.equal(batches[1][0], torch.arange(128, 256))  # row 0's second sequence
    assert len(causal_proxy_batches(calib, 128, 10_000)) == 6  # 2 whole sequences per row
    with pytest.raises(ValueError, match="fewer than 128 tokens"):
        causal_proxy_batches(calib[:, :100], 128, 256)


def test_calibrated_candidates_fitted_on_a_fit_set() -> None:
    """With fit_batches, a GPTQ candidate is fitted on them (the float model's statistics of that
    layer's input) and measured on every proxy batch: the proxy equals a by-hand quantization of the
    one layer through pyquant.quantize on the fit batches; uncalibrated candidates are unchanged."""
    model = _toy()
    gptq = Int4Config(32, algorithm="gptq")
    name = resolve_candidates([gptq])[0].name
    layer, fit = "blocks.0.fc2", _data(3, n=6)
    s = measure_sensitivity(
        model, [gptq, "int4-b32"], CALIB, _out, proxy="mse", layers=[layer], fit_batches=fit, progress=False
    )
    assert s.fit == "fit set" and s.fit_tokens == 6 * 2 * 8
    q = pyquant.quantize(
        copy.deepcopy(model),
        QuantizeConfig(default=None, overrides={layer: gptq}),
        calibration_data=fit,
        forward_fn=lambda m, b: m(b),
    )
    with torch.no_grad():
        errs = [((q(x) - model(x)) ** 2).sum(-1) / (model(x) ** 2).sum(-1) for x in CALIB]
    want = float(torch.cat([e.flatten() for e in errs]).mean())
    assert s.proxy[layer][name] == pytest.approx(want, rel=1e-4)
    folds = measure_sensitivity(
        model, [gptq, "int4-b32"], CALIB, _out, proxy="mse", layers=[layer], progress=False
    )
    assert folds.fit == "folds" and folds.proxy[layer]["int4-b32"] == s.proxy[layer]["int4-b32"]
    assert folds.proxy[layer][name] != s.proxy[layer][name]
    # A known result fitted the other way is measured again for calibrated candidates only.
    again = measure_sensitivity(
        model,
        [gptq, "int4-b32"],
        CALIB,
        _out,
        proxy="mse",
        layers=[layer],
        known=folds,
        fit_batches=fit,
        progress=False,
    )
    assert again.proxy[layer] == pytest.approx(s.proxy[layer], rel=1e-6)
    back = type(s).from_dict(json.loads(json.dumps(s.to_dict())))
    assert (back.fit, back.fit_tokens) == ("fit set", 96)


def test_causal_proxy_and_fit_batches() -> None:
    import numpy as np

    from pyquant.eval import causal_proxy_and_fit_batches

    calib = np.arange(5 * 300).reshape(5, 300)
    proxy, fit = causal_proxy_and_fit_batches(calib, 128, 256, batch_size=2)
    assert [b.shape for b in proxy] == [torch.Size([1, 128])] * 2
    assert torch.equal(proxy[0][0], torch.arange(4 * 300, 4 * 300 + 128))  # the last row
    assert [b.shape for b in fit] == [torch.Size([2, 300]), torch.Size([2, 300])]  # rows 0-3
    assert torch.equal(torch.cat(fit), torch.as_tensor(calib[:4]))
    proxy, fit = causal_proxy_and_fit_batches(calib, 128, 600, batch_size=3)  # needs 2 rows
    assert len(proxy) == 4 and torch.equal(torch.cat(fit), torch.as_tensor(calib[:3]))
    proxy, fit = causal_proxy_and_fit_batches(calib[:1], 128, 256, batch_size=2)
    assert fit is None and len(proxy) == 2  # one row: cross-fitting on the proxy batches


def test_awq_candidates_become_a_prescale(sens, tmp_path) -> None:
    """A plan's AWQ candidates: one prescale of every planned group (QuantizeConfig.awq_prescale) and
    the candidate's own final quantizer; the plan file keeps the prescale."""
    from pyquant.eval import _awq_candidates

    cands = resolve_candidates(
        ["fp8", Int4Config(64, False, "awq-gptq", act_order=True), Int4Config(64, False, "awq")]
    )
    out, pre = _awq_candidates(cands)
    assert pre == Int4Config(64, symmetric=False, algorithm="awq")
    assert [c.name for c in out] == [c.name for c in cands]
    assert out[1].config == Int4Config(64, False, "gptq", act_order=True)
    assert out[2].config == Int4Config(64, False, "mse") and out[0].config == cands[0].config
    with pytest.raises(ValueError, match="share one INT4 format"):
        _awq_candidates(
            resolve_candidates([Int4Config(64, algorithm="awq"), Int4Config(128, algorithm="awq")])
        )
    assert _awq_candidates(resolve_candidates(["fp8", "int4-b32"]))[1] is None

    model, s = sens
    plan = make_plan(s, 0.01, _verifier(model)[0], model_name="toy", progress=False)
    plan.awq_prescale = Int4Config(32, algorithm="awq")
    plan.save(tmp_path / "p.json")
    loaded = Plan.load(tmp_path / "p.json")
    assert loaded.awq_prescale == plan.awq_prescale
    assert loaded.quantize_config(model).awq_prescale == Int4Config(32, algorithm="awq")
