"""The PyTorch pass: replace nn.Linear layers with Int4Linear / Fp8Linear.

    model = pyquant.quantize(model, pyquant.Int4Config(block_size=128))
    model = pyquant.quantize(model, QuantizeConfig(default=Fp8Config(activation="static"),
                                                   exclude=["lm_head"]), calibration_data=batches)

Steps: pick layers (QuantizeConfig.for_layer), check each can be quantized (else skip it with a
logged reason, or raise for an explicit override that cannot be honoured), collect calibration
statistics if a layer's scheme or algorithm needs them, run the registered weight quantizer, and
swap the module. ``model.pyquant_summary`` records what was done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from pyquant.algorithms import CalibrationStats, Fp8Packed, Int4Packed, get_weight_quantizer
from pyquant.block_cache import BlockCache, Fingerprint, StopForward, block_stages, record_up_to, stop_forward
from pyquant.calibration import AbsDistribution, clip_from_stats
from pyquant.config import (
    Fp8Config,
    Int4Config,
    LayerConfig,
    QuantizeConfig,
    _layer_from_dict,
    _layer_to_dict,
    as_quantize_config,
)
from pyquant.modules import Fp8Linear, Int4Linear, QuantizedLinear

__all__ = ["quantize", "QuantizeSummary", "save_quantized", "load_quantized", "quantized_layers"]

log = logging.getLogger("pyquant")

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass
class QuantizeSummary:
    quantized: dict[str, LayerConfig] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # name -> reason (only for layers a config chose)
    float_bytes: int = 0  # bytes of the replaced float weights
    packed_bytes: int = 0  # bytes of their packed replacements
    smoothing: Any = None  # pyquant.smooth.SmoothReport when QuantizeConfig.smoothing was set
    awq: Any = None  # pyquant.awq.AwqReport when a layer used Int4Config(algorithm="awq" | "awq-gptq")

    def table(self) -> str:
        rows = [f"{'layer':60s} scheme"]
        rows += [f"{n:60s} {c.describe()}" for n, c in self.quantized.items()]
        rows += [f"{n:60s} float ({r})" for n, r in self.skipped.items()]
        return "\n".join(rows)


def _skip_reason(
    name: str, module: nn.Module, parent: nn.Module | None, cfg: Int4Config | Fp8Config
) -> str | None:
    """Why this layer cannot be quantized with cfg, or None."""
    if isinstance(parent, nn.MultiheadAttention):
        # MultiheadAttention reads out_proj.weight directly instead of calling the module.
        return "inside nn.MultiheadAttention, which uses the weight tensor directly"
    w = module.weight
    if w.dtype not in FLOAT_DTYPES:
        return f"weight dtype {w.dtype} is not float32/float16/bfloat16"
    if w.device.type == "meta":
        return "weight is on the meta device (not materialized)"
    k = module.in_features
    if isinstance(cfg, Int4Config) and k < cfg.block_size:
        return f"in_features={k} < block_size={cfg.block_size} (use a smaller block)"
    if isinstance(cfg, Fp8Config) and cfg.weight_block_size and k < cfg.weight_block_size:
        return f"in_features={k} < weight_block_size={cfg.weight_block_size}"
    return None


def _parent_and_attr(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    parent_name, _, attr = name.rpartition(".")
    return (model.get_submodule(parent_name) if parent_name else model), attr


def _call_model(model: nn.Module, batch: Any) -> Any:
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def _collect_stats(
    model: nn.Module,
    layers: dict[str, nn.Linear],
    needs: dict[str, frozenset[str]],
    calibration_data: Iterable[Any],
    forward_fn: Callable[[nn.Module, Any], Any] | None,
    progress: bool,
    stop_at: nn.Module | None = None,
    around_batch: Callable[[int], AbstractContextManager[Any]] | None = None,
) -> dict[str, CalibrationStats]:
    """Calibration statistics of ``layers`` over the batches. ``stop_at``: a module whose call ends
    each pass (after the hooks above have seen its input): nothing past it is needed.
    ``around_batch(i)``: a context the pass of batch i runs in (blocks replayed, see BlockCache)."""
    stats = {name: CalibrationStats() for name in needs}
    sums: dict[str, torch.Tensor] = {}
    # Layers called one after another on the same input tensor (q/k/v, gate/up) share its x^T x,
    # the costliest statistic (2 T K^2 flops per layer and batch).
    last_xtx: list[Any] = [None, None]  # [input tensor, its x^T x]

    def hook_for(name: str):  # noqa: ANN202
        kinds = needs[name]

        def hook(mod: nn.Module, args: tuple, kwargs: dict | None = None) -> None:
            x = args[0].detach().reshape(-1, mod.in_features).float()
            st = stats[name]
            st.n_tokens += x.shape[0]
            if "amax" in kinds:
                a = float(x.abs().max()) if x.numel() else 0.0
                st.amax = a if st.amax is None else max(st.amax, a)
            if "abs_mean" in kinds:
                sums[name] = sums.get(name, 0) + x.abs().sum(0)
            if "hessian" in kinds:
                if args[0] is not last_xtx[0]:
                    last_xtx[:] = [args[0], x.t() @ x]
                st.hessian = (0 if st.hessian is None else st.hessian) + last_xtx[1]
            if "abs_dist" in kinds:
                if st.abs_dist is None:
                    st.abs_dist = AbsDistribution()
                st.abs_dist.add(x)

        return hook

    handles = [layers[n].register_forward_pre_hook(hook_for(n)) for n in needs]
    if stop_at is not None:  # registered last: pre-hooks run in registration order
        handles.append(stop_at.register_forward_pre_hook(stop_forward))
    try:
        it = calibration_data
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(calibration_data, desc="calibrating", unit="batch")
        with torch.no_grad():
            for i, batch in enumerate(it):
                try:
                    with around_batch(i) if around_batch else nullcontext():
                        (forward_fn or _call_model)(model, batch)
                except StopForward:
                    pass
    finally:
        last_xtx[:] = [None, None]
        for h in handles:
            h.remove()
    for name, st in stats.items():
        if st.n_tokens == 0:
            raise ValueError(f"layer {name!r} saw no calibration tokens (is it used by the forward pass?)")
        if name in sums:
            st.abs_mean = sums[name] / st.n_tokens
    return stats


def _forward_groups(
    model: nn.Module,
    layers: dict[str, nn.Linear],
    batch: Any,
    forward_fn: Callable[[nn.Module, Any], Any] | None,
) -> tuple[list[list[str]], bool, Any]:
    """-> (layer names in groups, in the order one forward pass of ``batch`` first calls them;
    whether every called layer was called exactly once; the model's output). Consecutive calls on
    the same input tensor (q/k/v on the normed hidden states, gate/up on the MLP input) share a
    group. Layers the pass never calls form a last group."""
    order: list[list[str]] = []
    calls: dict[str, int] = {}
    last_input: list[Any] = [None]  # only the previous call's input is kept alive

    def hook_for(name: str):  # noqa: ANN202
        def hook(mod: nn.Module, args: tuple) -> None:
            calls[name] = calls.get(name, 0) + 1
            if calls[name] > 1:
                return
            x = args[0] if args else None
            if order and x is not None and x is last_input[0]:
                order[-1].append(name)
            else:
                order.append([name])
            last_input[0] = x

        return hook

    handles = [m.register_forward_pre_hook(hook_for(n)) for n, m in layers.items()]
    try:
        with torch.no_grad():
            out = (forward_fn or _call_model)(model, batch)
    finally:
        for h in handles:
            h.remove()
    last_input[0] = None
    unseen = [n for n in layers if n not in calls]
    return order + ([unseen] if unseen else []), all(c == 1 for c in calls.values()), out


def _quantize_sequential(
    model: nn.Module,
    chosen: dict[str, tuple[nn.Linear, Int4Config | Fp8Config]],
    needs: dict[str, frozenset[str]],
    calibration_data: Iterable[Any],
    forward_fn: Callable[[nn.Module, Any], Any] | None,
    progress: bool,
    summary: QuantizeSummary,
) -> None:
    """QuantizeConfig(sequential=True): groups in call order, each calibrated on the model with the
    groups before it quantized.

    Cost: a group's pass stops after the group's last layer (when every layer runs once per
    forward), and where the model has a stack of blocks (transformer layers) that replays, the blocks
    before the group's block return their recorded outputs (of the quantized blocks, see BlockCache)
    instead of running again. So each block runs about (its groups + 1) times over the calibration
    data, instead of every group re-running the whole model before it."""
    batches = list(calibration_data)
    if not batches:
        raise ValueError("calibration_data is empty: sequential quantization needs at least one batch")
    fwd = forward_fn or _call_model
    cache = BlockCache(model, list(chosen))
    with cache.record(0):
        groups, once, reference = _forward_groups(
            model, {n: m for n, (m, _) in chosen.items()}, batches[0], forward_fn
        )
    reference = Fingerprint(reference)  # the full output is not kept beside the replayed one
    with torch.no_grad():
        replay = cache.replays(0, lambda: fwd(model, batches[0]), reference)
    # Block index per group (-1: before the stack, len(blocks): after it); replay needs them in order.
    where: list[int] = []
    for g in groups:
        b = cache.block_of.get(g[0])
        where.append(b if b is not None else (len(cache.blocks) if any(w >= 0 for w in where) else -1))
    if replay and where != sorted(where):
        log.info("pyquant: layers outside the stack of blocks run between its blocks; no block replay")
        replay = False
    done = 0  # blocks 0..done-1 have recorded (quantized) outputs for every batch

    it: Iterable[tuple[list[str], int]] = zip(groups, where, strict=True)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(list(it), desc="quantizing (sequential)", unit="group")
    for group, b in it:
        start = max(b, 0) if replay else 0
        # the blocks before this group are final: record them
        record_up_to(cache, done, start, batches, lambda batch: fwd(model, batch))
        done = max(done, start)
        group_needs = {n: needs[n] for n in group if n in needs}
        stats: dict[str, CalibrationStats] = {}
        if group_needs:
            stats = _collect_stats(
                model,
                {n: chosen[n][0] for n in group_needs},
                group_needs,
                batches,
                forward_fn,
                progress=False,
                stop_at=chosen[group[-1]][0] if once else None,
                around_batch=(lambda i, start=start: cache.skip(i, start)) if replay else None,
            )
        for name in group:
            _replace_layer(model, name, *chosen[name], stats.get(name), summary)


def _quantize_calibrated(
    model: nn.Module,
    chosen: dict[str, tuple[nn.Linear, Int4Config | Fp8Config]],
    needs: dict[str, frozenset[str]],
    calibration_data: Iterable[Any],
    forward_fn: Callable[[nn.Module, Any], Any] | None,
    progress: bool,
    summary: QuantizeSummary,
) -> None:
    """One-pass calibration (every layer's statistics from the float model) of the layers in
    ``needs``, quantized as their statistics are complete.

    Where the model's stack of blocks replays (``block_stages``), one block at a time: a pass stops
    after the block (the blocks before it replay their recorded float outputs) and keeps its output,
    then the block's layers are quantized and their statistics dropped. GPTQ's [K, K] x^T x then live
    for one block at once (a 7B Llama: ~0.7 GB instead of ~22 GB) at about one pass's cost; the
    statistics are those of one pass over the float model, since replayed blocks are never recomputed
    with quantized layers."""
    batches = list(calibration_data)
    if not batches:
        raise ValueError("calibration_data is empty: the layers' algorithms need at least one batch")
    layers = {n: chosen[n][0] for n in needs}
    for names, stats in _stats_by_block(
        model, {n: [n] for n in needs}, layers, needs, batches, forward_fn, progress
    ):
        for name in names:
            _replace_layer(model, name, *chosen[name], stats.pop(name), summary)


def _stats_by_block(
    model: nn.Module,
    units: dict[str, list[str]],
    layers: dict[str, nn.Linear],
    needs: dict[str, frozenset[str]],
    batches: list[Any],
    forward_fn: Callable[[nn.Module, Any], Any] | None,
    progress: bool,
) -> Iterator[tuple[list[str], dict[str, CalibrationStats]]]:
    """Yields (units of one stage, the statistics of their layers in ``needs``), block by block where
    the model's blocks replay (``block_stages``; ``units``: key -> its layer names, all in one block or
    all outside the stack, which come last), else once for every unit. A stage's pass replays the
    blocks before it, stops after its block and records that block's output, so the caller may change
    the stage's layers (quantize, fold) before the next stage is computed: later stages see the block
    as it was recorded."""
    fwd = forward_fn or _call_model

    def run(batch: Any) -> Any:
        return fwd(model, batch)

    stages, cache = block_stages(model, units, batches, run)
    it: Iterable[tuple[int, list[str]]] = stages
    if progress and cache is not None:
        from tqdm.auto import tqdm

        it = tqdm(stages, desc="calibrating (by block)", unit="block")
    done = 0  # blocks 0..done-1 have recorded outputs for every batch (with a cache)
    for start, keys in it:
        if cache is not None:
            record_up_to(cache, done, start, batches, run)  # blocks between stages
            done = start + 1  # the statistics pass records this stage's block
        names = [n for k in keys for n in units[k] if n in needs]
        yield (
            keys,
            _collect_stats(
                model,
                {n: layers[n] for n in names},
                {n: needs[n] for n in names},
                batches,
                forward_fn,
                progress=progress and cache is None,
                around_batch=_stage_pass(cache, start),
            ),
        )


def _stage_pass(cache: BlockCache | None, stage: int) -> Callable[[int], Any] | None:
    """The context around batch i's statistics pass of a stage (``block_stages``): block ``stage``'s
    recording (blocks before it replayed, the pass stops after it), or for the last stage (layers
    after the stack) every block replayed and the rest of the model run."""
    if cache is None:
        return None
    if stage < len(cache.blocks):
        return lambda i: cache.recording(i, stage)
    return lambda i: cache.skip(i, stage)


def _replace_layer(
    model: nn.Module,
    name: str,
    mod: nn.Linear,
    cfg: Int4Config | Fp8Config,
    st: CalibrationStats | None,
    summary: QuantizeSummary,
) -> None:
    """Quantize one float layer with its config's algorithm and put the quantized module in its place."""
    fn, _ = get_weight_quantizer(cfg.scheme, cfg.algorithm)
    with torch.no_grad():
        packed = fn(mod.weight.detach().float(), cfg, st)
    dev = mod.weight.device
    if isinstance(cfg, Int4Config):
        if not isinstance(packed, Int4Packed):
            raise ValueError(
                f"int4 quantizer {cfg.algorithm!r} returned {type(packed).__name__} for {name!r}"
            )
        packed = Int4Packed(
            *(None if t is None else t.to(dev) for t in (packed.qweight, packed.scales, packed.zero_points))
        )
        new: nn.Module = Int4Linear.from_packed(mod, packed, cfg, name)
    else:
        if not isinstance(packed, Fp8Packed):
            raise ValueError(f"fp8 quantizer {cfg.algorithm!r} returned {type(packed).__name__} for {name!r}")
        packed = Fp8Packed(packed.weight.to(dev), packed.w_scale.to(dev))
        clip = None
        if st is not None and st.amax is not None:
            clip = clip_from_stats(cfg.calibration, st.amax, st.abs_dist, cfg.percentile)
        new = Fp8Linear.from_packed(mod, packed, cfg, name, input_amax=clip)
    parent, attr = _parent_and_attr(model, name)
    setattr(parent, attr, new)
    summary.quantized[name] = cfg
    summary.float_bytes += mod.weight.numel() * mod.weight.element_size()
    summary.packed_bytes += new.packed_nbytes() - (
        0 if mod.bias is None else mod.bias.numel() * mod.bias.element_size()
    )


def calibration_needs(cfg: Int4Config | Fp8Config) -> frozenset[str]:
    """The calibration statistics quantizing one layer with ``cfg`` needs (empty: it fits nothing to
    data): its weight algorithm's, plus the activation range of static FP8."""
    _, algo_needs = get_weight_quantizer(cfg.scheme, cfg.algorithm)
    kinds = set(algo_needs)
    if isinstance(cfg, Fp8Config) and cfg.activation == "static":
        kinds.add("amax")
        if cfg.calibration != "amax":
            kinds.add("abs_dist")
    return frozenset(kinds)


def quantize(
    model: nn.Module,
    config: QuantizeConfig | Int4Config | Fp8Config,
    *,
    calibration_data: Iterable[Any] | None = None,
    forward_fn: Callable[[nn.Module, Any], Any] | None = None,
    progress: bool = False,
) -> nn.Module:
    """Replace the selected nn.Linear layers of ``model`` (in place) and return it.

    calibration_data: batches for layers that need activation statistics (static FP8, smoothing, or an
        algorithm declaring ``needs``); each batch is passed as model(**b), model(*b) or model(b),
        or to ``forward_fn(model, batch)``.
    """
    qcfg = as_quantize_config(config)
    modules = dict(model.named_modules())
    if not any(isinstance(m, (nn.Linear, *QuantizedLinear)) for m in modules.values()):
        # Otherwise the call would return the model unchanged, and the mistake would surface only
        # later (an export without pyquant nodes, or save_quantized refusing an unquantized model).
        raise ValueError(
            f"{type(model).__name__} has no nn.Linear layers: nothing to quantize (pyquant replaces "
            "nn.Linear only; convolutions, embeddings and fused attention weights stay as they are)"
        )
    for key in qcfg.overrides:
        if key in modules:
            if not isinstance(modules[key], nn.Linear):
                raise ValueError(
                    f"override for layer {key!r}: {type(modules[key]).__name__} is not an nn.Linear "
                    "(only nn.Linear layers can be quantized)"
                )
        elif not any(c in key for c in "*?["):
            raise ValueError(f"override for layer {key!r}: the model has no module of that name")

    summary = QuantizeSummary()
    chosen: dict[str, tuple[nn.Linear, Int4Config | Fp8Config]] = {}
    for name, mod in modules.items():
        if not isinstance(mod, nn.Linear) or isinstance(mod, QuantizedLinear):
            continue
        cfg, why = qcfg.for_layer(name, mod)
        if cfg is None:
            continue
        if name == "":
            raise ValueError(
                "cannot quantize the root module itself; wrap the nn.Linear in a container module"
            )
        parent = _parent_and_attr(model, name)[0]
        reason = _skip_reason(name, mod, parent, cfg)
        if reason is not None and why.startswith("override") and name in qcfg.overrides:
            raise ValueError(f"layer {name!r} cannot be quantized as requested ({cfg.describe()}): {reason}")
        if reason is not None:
            log.warning("pyquant: keeping layer %r in float: %s", name, reason)
            summary.skipped[name] = reason
            continue
        chosen[name] = (mod, cfg)

    for _, cfg in chosen.values():  # unknown algorithm names fail before any pre-pass mutates the model
        get_weight_quantizer(cfg.scheme, cfg.algorithm)

    if qcfg.smoothing is not None:
        if calibration_data is None:
            raise ValueError("QuantizeConfig.smoothing needs calibration_data (pass it to pyquant.quantize)")
        from pyquant.smooth import smooth_model

        calibration_data = list(calibration_data)  # iterated again for the statistics below
        fp8 = {n for n, (_, c) in chosen.items() if isinstance(c, Fp8Config)}
        summary.smoothing = smooth_model(
            model, calibration_data, qcfg.smoothing, forward_fn=forward_fn, layer_filter=fp8.__contains__
        )

    from pyquant.awq import AWQ_ALGORITHMS

    awq_layers = {
        n: c for n, (_, c) in chosen.items() if isinstance(c, Int4Config) and c.algorithm in AWQ_ALGORITHMS
    }
    if qcfg.awq_prescale is not None:
        if awq_layers:
            first = next(iter(awq_layers))
            raise ValueError(
                f"QuantizeConfig.awq_prescale already scales every layer; layer {first!r} asks for int4 "
                f"{awq_layers[first].algorithm!r} as well (use 'gptq' / 'mse' with awq_prescale)"
            )
        awq_layers = awq_prescale_layers(model, qcfg)
    if awq_layers:
        # Model-level pre-pass, like smoothing: groups of layers sharing one input get one scale
        # vector, folded into the op producing that input, before any weight is quantized.
        if calibration_data is None:
            first = next(iter(awq_layers))
            raise ValueError(
                f"layer {first!r} uses int4 {awq_layers[first].algorithm!r}, which needs calibration_data "
                "(pass it to pyquant.quantize)"
            )
        from pyquant.awq import awq_model

        calibration_data = list(calibration_data)  # iterated again for the statistics below
        summary.awq = awq_model(model, calibration_data, awq_layers, forward_fn=forward_fn, progress=progress)

    needs: dict[str, frozenset[str]] = {}
    for name, (_, cfg) in chosen.items():
        kinds = calibration_needs(cfg)
        if kinds:
            needs[name] = kinds
    if needs and calibration_data is None:
        first = next(iter(needs))
        raise ValueError(
            f"layer {first!r} (and {len(needs) - 1} more) need calibration statistics "
            f"{sorted(needs[first])}: pass calibration_data to pyquant.quantize"
        )
    if needs and qcfg.sequential:
        _quantize_sequential(model, chosen, needs, calibration_data, forward_fn, progress, summary)
    else:
        if needs:
            _quantize_calibrated(model, chosen, needs, calibration_data, forward_fn, progress, summary)
        items = [(n, mc) for n, mc in chosen.items() if n not in needs]
        if progress:
            from tqdm.auto import tqdm

            items = tqdm(items, desc="quantizing", unit="layer")
        for name, (mod, cfg) in items:
            _replace_layer(model, name, mod, cfg, None, summary)
    prev = getattr(model, "pyquant_summary", None)
    if isinstance(prev, QuantizeSummary):  # quantizing in several passes: merge
        prev.quantized.update(summary.quantized)
        prev.skipped.update({k: v for k, v in summary.skipped.items() if k not in prev.quantized})
        prev.float_bytes += summary.float_bytes
        prev.packed_bytes += summary.packed_bytes
        prev.smoothing = summary.smoothing or prev.smoothing
        prev.awq = summary.awq or prev.awq
        summary = prev
    model.pyquant_summary = summary
    log.info("pyquant: quantized %d layers, kept %d in float", len(summary.quantized), len(summary.skipped))
    return model


def awq_prescale_layers(model: nn.Module, qcfg: QuantizeConfig) -> dict[str, Int4Config]:
    """The layers ``QuantizeConfig.awq_prescale`` scales, each with that config: every float nn.Linear
    in scope, float-planned ones too, so that a group's scales do not depend on which of its layers a
    plan quantizes (``pyquant.eval.plan_model`` measures its candidates on the same scaling)."""
    assert qcfg.awq_prescale is not None
    return {
        n: qcfg.awq_prescale
        for n, m in model.named_modules()
        if n
        and isinstance(m, nn.Linear)
        and not isinstance(m, QuantizedLinear)
        and qcfg.out_of_scope(n, m) is None
    }


def quantized_layers(model: nn.Module) -> dict[str, Int4Linear | Fp8Linear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, QuantizedLinear)}


# --- checkpoints -------------------------------------------------------------------------------


def save_quantized(model: nn.Module, path: str | Path) -> None:
    """Save the quantized state (packed buffers and every layer's config) with torch.save."""
    layers = {n: _layer_to_dict(m.config) for n, m in quantized_layers(model).items()}
    if not layers:
        raise ValueError("the model has no quantized layers; run pyquant.quantize first")
    torch.save({"format": "pyquant-1", "layers": layers, "state_dict": model.state_dict()}, str(path))


def load_quantized(model: nn.Module, path: str | Path, strict: bool = True) -> nn.Module:
    """Turn a float ``model`` of the same architecture into the saved quantized model (no re-quantization)."""
    ckpt = torch.load(str(path), map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("format") != "pyquant-1":
        raise ValueError(f"{path}: not a pyquant checkpoint (see pyquant.save_quantized)")
    for name, d in ckpt["layers"].items():
        cfg = _layer_from_dict(d)
        try:
            mod = model.get_submodule(name)
        except AttributeError:
            raise ValueError(f"checkpoint layer {name!r} does not exist in the model") from None
        if isinstance(mod, QuantizedLinear):
            continue
        if not isinstance(mod, nn.Linear):
            raise ValueError(
                f"checkpoint layer {name!r} is a {type(mod).__name__} in the model, not nn.Linear"
            )
        cls = Int4Linear if isinstance(cfg, Int4Config) else Fp8Linear
        new = cls.like(mod, cfg, name)  # empty; load_state_dict below fills the packed buffers
        parent, attr = _parent_and_attr(model, name)
        setattr(parent, attr, new)
    model.load_state_dict(ckpt["state_dict"], strict=strict)
    model.pyquant_summary = QuantizeSummary(
        quantized={n: _layer_from_dict(d) for n, d in ckpt["layers"].items()}
    )
    return model
