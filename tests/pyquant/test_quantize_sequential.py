"""QuantizeConfig(sequential=True): layer groups in call order, each calibrated on the model with the
groups before it already quantized (GPTQ's sequential mode)."""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn as nn

from pyquant.algorithms import CalibrationStats, get_weight_quantizer, register_weight_quantizer
from pyquant.block_cache import BlockCache, Fingerprint
from pyquant.config import Int4Config, QuantizeConfig, config_from_dict
from pyquant.modules import Int4Linear
from pyquant.quantize import _forward_groups, quantize
from tests.pyquant.tiny_models import tiny_llama

# What a data-fitting quantizer was given, in call order: (weight it quantized, its statistics).
_RECORDED: list[tuple[torch.Tensor, CalibrationStats]] = []


@register_weight_quantizer("int4", "test-record-hessian", needs={"hessian"})
def _record_then_rtn(weight: torch.Tensor, config: Int4Config, stats: CalibrationStats | None):  # noqa: ANN202
    _RECORDED.append((weight.clone(), stats))
    return get_weight_quantizer("int4", "rtn")[0](weight, config, stats)


def _recorded_for(layer: nn.Linear) -> CalibrationStats:
    hits = [st for w, st in _RECORDED if torch.equal(w, layer.weight.detach().float())]
    assert len(hits) == 1
    return hits[0]


class Chain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(64, 64)
        self.b = nn.Linear(64, 64)
        self.c = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


class SharedInput(nn.Module):
    """q and k read one tensor (one group), o reads their product (the next group)."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(64, 64)
        self.k = nn.Linear(64, 64)
        self.o = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x)
        return self.o(self.q(h) * self.k(h))


class CalledTwice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(64, 64)
        self.c = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(self.a(torch.relu(self.a(x))))


def _batches(n: int = 3, tokens: int = 40, k: int = 64) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(tokens, k, generator=g) * 2 for _ in range(n)]


CFG = Int4Config(32, algorithm="test-record-hessian")


@pytest.mark.parametrize("sequential", [True, False])
def test_hessian_is_taken_on_the_inputs_the_layer_will_see(sequential: bool) -> None:
    torch.manual_seed(0)
    model = Chain()
    float_a, float_b, float_c = model.a, model.b, model.c
    batches = _batches()
    _RECORDED.clear()
    quantize(model, QuantizeConfig(default=CFG, sequential=sequential), calibration_data=batches)
    assert all(isinstance(getattr(model, n), Int4Linear) for n in "abc")
    with torch.no_grad():
        # b's input: relu(a(x)) with a as quantized (sequential) or still float (one pass)
        a = model.a if sequential else float_a
        xb = [torch.relu(a(x)) for x in batches]
        b = model.b if sequential else float_b
        xc = [torch.relu(b(v)) for v in xb]
    for layer, inputs in [(float_a, batches), (float_b, xb), (float_c, xc)]:
        st = _recorded_for(layer)
        want = sum(x.t() @ x for x in inputs)
        assert st.n_tokens == sum(x.shape[0] for x in inputs)
        torch.testing.assert_close(st.hessian, want, rtol=1e-5, atol=1e-3)
    # The quantized a changes b's input: the two modes must differ there (else the test proves nothing).
    with torch.no_grad():
        assert not torch.allclose(model.a(batches[0]), float_a(batches[0]), atol=1e-4)


def test_groups_follow_call_order_and_shared_inputs() -> None:
    m = SharedInput()
    layers = {n: getattr(m, n) for n in ("o", "k", "q")}  # dict order must not matter
    groups, once, _ = _forward_groups(m, layers, torch.randn(5, 64), None)
    assert groups == [["q", "k"], ["o"]] and once
    m2 = CalledTwice()
    groups, once, _ = _forward_groups(m2, dict(m2.named_children()), torch.randn(5, 64), None)
    assert groups == [["a"], ["c"]] and not once


def test_passes_stop_after_their_group() -> None:
    torch.manual_seed(0)
    model = Chain()
    runs = {n: 0 for n in "abc"}
    for n in "abc":
        getattr(model, n).register_forward_hook(lambda *_, n=n: runs.__setitem__(n, runs[n] + 1))
    quantize(model, QuantizeConfig(default=CFG, sequential=True), calibration_data=_batches(n=2))
    # Each float layer ran only in the grouping pass (first batch): its own calibration passes stop
    # at its input, and later passes run its quantized replacement.
    assert runs == {"a": 1, "b": 1, "c": 1}


def test_layer_called_twice_sees_both_inputs() -> None:
    torch.manual_seed(0)
    model = CalledTwice()
    float_a = model.a
    batches = _batches(n=2)
    _RECORDED.clear()
    quantize(model, QuantizeConfig(default=CFG, sequential=True), calibration_data=batches)
    with torch.no_grad():
        inputs = batches + [torch.relu(float_a(x)) for x in batches]
    st = _recorded_for(float_a)
    assert st.n_tokens == 2 * sum(x.shape[0] for x in batches)
    torch.testing.assert_close(st.hessian, sum(x.t() @ x for x in inputs), rtol=1e-5, atol=1e-3)


def test_llama_groups_and_quantize() -> None:
    model = tiny_llama()
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    linears = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and n != "lm_head"}
    groups, once, _ = _forward_groups(model, linears, batch, lambda m, b: m(**b))
    short = [[n.split(".", 3)[-1] for n in g] for g in groups]
    per_block = [["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], ["self_attn.o_proj"]]
    per_block += [["mlp.gate_proj", "mlp.up_proj"], ["mlp.down_proj"]]
    assert short == per_block * 2 and once
    cfg = QuantizeConfig(default=Int4Config(32, algorithm="gptq"), exclude=["lm_head"], sequential=True)
    q = quantize(model, cfg, calibration_data=[batch, batch])
    assert len(q.pyquant_summary.quantized) == len(linears)
    assert torch.isfinite(q(**batch).logits).all()


def test_config_and_bad_input() -> None:
    cfg = QuantizeConfig(default=Int4Config(algorithm="gptq"), sequential=True)
    assert config_from_dict(cfg.to_dict()).sequential
    assert not config_from_dict({"default": None}).sequential
    with pytest.raises(ValueError, match="sequential must be a bool"):
        QuantizeConfig(sequential="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="calibration_data is empty"):
        quantize(Chain(), QuantizeConfig(default=CFG, sequential=True), calibration_data=[])
    with pytest.raises(ValueError, match="calibration"):
        quantize(Chain(), QuantizeConfig(default=CFG, sequential=True))
    # nothing fits to data: sequential changes nothing
    torch.manual_seed(0)
    a, b = Chain(), Chain()
    b.load_state_dict(a.state_dict())
    quantize(a, QuantizeConfig(default=Int4Config(32), sequential=True), calibration_data=_batches())
    quantize(b, Int4Config(32))
    x = torch.randn(4, 64)
    assert torch.equal(a(x), b(x))


def test_recipe_suffix() -> None:
    from pyquant.models import get_recipe

    r = get_recipe("smollm2")
    q = r.quantize_config("int4-b64-asym-awq-gptq-act-seq")
    assert q.sequential and q.default == Int4Config(64, False, "awq-gptq", act_order=True)
    assert not r.quantize_config("int4-b64-gptq").sequential
    assert r.quantize_config("fp8-gptq-seq-sq0.5").sequential
    with pytest.raises(ValueError, match="quantized scheme"):
        r.quantize_config("float-seq")


def _llama_batches(n: int = 3) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(0, 128, (2, 16), generator=g)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    return out


def _record_sequential(model: nn.Module, batches: list) -> dict[str, torch.Tensor]:
    """Hessian per layer name from a sequential quantization of ``model``."""
    weights = {
        n: m.weight.detach().float().clone() for n, m in model.named_modules() if isinstance(m, nn.Linear)
    }
    _RECORDED.clear()
    cfg = QuantizeConfig(default=CFG, exclude=["lm_head"], sequential=True)
    quantize(model, cfg, calibration_data=batches, forward_fn=lambda m, b: m(**b))
    out = {}
    for w, st in _RECORDED:
        (name,) = [n for n, w0 in weights.items() if torch.equal(w0, w)]
        out[name] = st.hessian
    return out


def test_block_replay_matches_full_passes_and_runs_each_block_a_few_times(monkeypatch) -> None:
    """Replaying the quantized blocks' recorded outputs gives the statistics of full passes, with
    each block computed once per group pass plus once to record its output."""
    batches = _llama_batches()
    model = tiny_llama(num_hidden_layers=3)
    ref_model = tiny_llama(num_hidden_layers=3)
    runs = [0, 0, 0]
    for j, layer in enumerate(model.model.layers):
        layer.input_layernorm.register_forward_hook(lambda *_, j=j: runs.__setitem__(j, runs[j] + 1))
    replayed = _record_sequential(model, batches)
    n = len(batches)
    assert runs == [1 + 5 * n, 1 + 5 * n, 1 + 4 * n]  # grouping pass; 4 group passes; recording
    monkeypatch.setattr("pyquant.block_cache.BlockCache.replays", lambda *a, **k: False)
    full = _record_sequential(ref_model, batches)
    assert replayed.keys() == full.keys() and len(full) == 21
    for name in full:
        torch.testing.assert_close(replayed[name], full[name], rtol=1e-4, atol=1e-4, msg=name)
    x = batches[0]
    torch.testing.assert_close(model(**x).logits, ref_model(**x).logits, rtol=1e-4, atol=1e-4)


class DenseStack(nn.Module):
    """Each block reads the sum of the model input and every earlier block's output (not just the
    previous one's): replay must keep every block's recorded output."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = [x]
        for b in self.blocks:
            outs.append(b(sum(outs)))
        return outs[-1]


def test_block_cache_chaining_and_replay_check() -> None:
    model = tiny_llama(num_hidden_layers=3)
    batch = _llama_batches(1)[0]
    layers = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    cache = BlockCache(model, layers)
    with torch.no_grad(), cache.record(0):
        ref = model(**batch)
    assert len(cache.blocks) == 3 and cache.chained
    assert cache.block("model.layers.2.mlp.up_proj") == 2 and cache.block("lm_head") == 0
    with torch.no_grad():
        assert cache.replays(0, lambda: model(**batch), ref)
        assert cache.replays(0, lambda: model(**batch), Fingerprint(ref))  # the reduced reference
        wrong = ref.logits.clone()
        wrong[0, 3] += 1.0  # one position of one sequence differs: the samples see it
        assert Fingerprint(ref.logits).matches(ref.logits) and not Fingerprint(ref.logits).matches(wrong)
        assert not cache.replays(0, lambda: model(**batch), ref.logits + 1)  # a wrong reference
    assert cache.blocks == []  # replay disabled
    dense = DenseStack()
    cache = BlockCache(dense, [f"blocks.{j}.0" for j in range(3)])
    with torch.no_grad(), cache.record(0):
        dense(torch.randn(4, 64))
    assert len(cache.blocks) == 3 and not cache.chained


def test_sequential_on_a_stack_that_does_not_chain(monkeypatch) -> None:
    torch.manual_seed(0)
    model = DenseStack()
    ref_model = DenseStack()
    ref_model.load_state_dict(model.state_dict())
    batches = _batches()
    got = []
    for m in (model, ref_model):
        floats = [b[0] for b in m.blocks]
        _RECORDED.clear()
        quantize(m, QuantizeConfig(default=CFG, sequential=True), calibration_data=batches)
        got.append([_recorded_for(f).hessian for f in floats])
        monkeypatch.setattr("pyquant.block_cache.BlockCache.replays", lambda *a, **k: False)
    for a, b in zip(*got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-3)
    x = batches[0]
    torch.testing.assert_close(model(x), ref_model(x))


@pytest.mark.parametrize("sequential", [True, False])
def test_layers_on_one_input_share_its_hessian(sequential: bool) -> None:
    torch.manual_seed(0)
    model = SharedInput()
    q, k, o = model.q, model.k, model.o
    batches = _batches()
    _RECORDED.clear()
    quantize(model, QuantizeConfig(default=CFG, sequential=sequential), calibration_data=batches)
    want = sum(torch.tanh(x).t() @ torch.tanh(x) for x in batches)
    for layer in (q, k):
        torch.testing.assert_close(_recorded_for(layer).hessian, want, rtol=1e-5, atol=1e-3)
    assert _recorded_for(q).hessian is not _recorded_for(k).hessian
    assert not torch.allclose(_recorded_for(o).hessian, want, atol=1.0)


def test_one_pass_calibrates_block_by_block(monkeypatch) -> None:
    """The one-pass mode on a stack of blocks: statistics one block at a time (earlier blocks
    replayed from recorded float outputs), each block's layers quantized before the next block's
    statistics exist, with the exact packed weights of one pass over the whole model."""
    q = importlib.import_module("pyquant.quantize")  # the module (pyquant.quantize is the function)

    model = tiny_llama(num_hidden_layers=3)
    batches = [torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    cfg = QuantizeConfig(default=Int4Config(32, symmetric=False, algorithm="gptq"), exclude=["lm_head"])
    stage_layers: list[list[str]] = []
    collect = q._collect_stats

    def spy(model, layers, *a, **k):  # noqa: ANN001, ANN202
        quantized = [n for n, m in model.named_modules() if isinstance(m, Int4Linear)]
        stage_layers.append(sorted(layers))
        assert not set(layers) & set(quantized)
        # every earlier block is already quantized when a block's statistics are collected
        assert len(quantized) == 7 * (len(stage_layers) - 1)
        return collect(model, layers, *a, **k)

    monkeypatch.setattr(q, "_collect_stats", spy)
    staged = quantize(tiny_llama(num_hidden_layers=3), cfg, calibration_data=batches)
    assert [len(s) for s in stage_layers] == [7, 7, 7]
    assert all(n.startswith(f"model.layers.{i}.") for i, s in enumerate(stage_layers) for n in s)
    monkeypatch.setattr(q, "_collect_stats", collect)
    monkeypatch.setattr(q, "block_stages", lambda model, units, *a: ([(0, list(units))], None))
    flat = quantize(model, cfg, calibration_data=batches)
    for name, m in staged.named_modules():
        if isinstance(m, Int4Linear):
            other = flat.get_submodule(name)
            assert torch.equal(m.qweight, other.qweight) and torch.equal(m.scales, other.scales), name
    with pytest.raises(ValueError, match="calibration_data is empty"):
        quantize(tiny_llama(num_hidden_layers=3), cfg, calibration_data=[])


def test_layers_after_the_stack_are_a_last_stage(monkeypatch) -> None:
    """A calibrated layer outside the stack of blocks (a GPTQ lm_head) keeps the block-by-block mode:
    it is calibrated last, in a pass that replays every block, with the packed weights of one pass."""
    q = importlib.import_module("pyquant.quantize")
    batches = [torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    cfg = QuantizeConfig(default=Int4Config(32, symmetric=False, algorithm="gptq"))
    stage_layers: list[list[str]] = []
    collect = q._collect_stats
    block_calls = [0]

    def spy(model, layers, *a, **k):  # noqa: ANN001, ANN202
        stage_layers.append(sorted(layers))
        return collect(model, layers, *a, **k)

    monkeypatch.setattr(q, "_collect_stats", spy)
    model = tiny_llama(num_hidden_layers=3)
    last = model.model.layers[2].self_attn.q_proj  # called only where block 2 is computed, not replayed
    last.register_forward_pre_hook(lambda *_: block_calls.__setitem__(0, block_calls[0] + 1))
    staged = quantize(model, cfg, calibration_data=batches)
    assert [len(s) for s in stage_layers] == [7, 7, 7, 1] and stage_layers[-1] == ["lm_head"]
    # the last block is computed when batch 0 is recorded for the replay check and once per batch in
    # its own stage; the lm_head stage replays it
    assert block_calls[0] == 1 + len(batches)
    monkeypatch.setattr(q, "_collect_stats", collect)
    monkeypatch.setattr(q, "block_stages", lambda model, units, *a: ([(0, list(units))], None))
    flat = quantize(tiny_llama(num_hidden_layers=3), cfg, calibration_data=batches)
    for name, m in staged.named_modules():
        if isinstance(m, Int4Linear):
            other = flat.get_submodule(name)
            assert torch.equal(m.qweight, other.qweight) and torch.equal(m.scales, other.scales), name
    assert isinstance(staged.lm_head, Int4Linear)


def test_fingerprint_samples_every_position() -> None:
    """The replay check's reduced reference: on an output larger than its sample budget, a change of
    any one position (what a wrong replay does to a sequence) is seen."""
    out = torch.randn(2, 512, 1000, generator=torch.Generator().manual_seed(0))
    fp = Fingerprint(out)
    assert fp.parts[0][1].numel() <= 2 * Fingerprint.SAMPLES and fp.matches(out.clone())
    for b, t in [(0, 0), (1, 300), (1, 511)]:
        wrong = out.clone()
        wrong[b, t] += 0.01
        assert not fp.matches(wrong), (b, t)
    assert not fp.matches(out[:, :256])  # another shape
    assert not fp.matches((out, out))  # another structure
