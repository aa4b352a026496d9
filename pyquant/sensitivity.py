"""Sensitivity analysis for the planner (``pyquant.planner``): the proxy cost of quantizing each layer
alone with each candidate precision.

For every (layer, candidate) the layer is swapped in place for the module ``pyquant.quantize`` would
build (same weight-quantizer registry, eager op numerics), the calibration batches run, and the
outputs are compared with the cached float outputs: KL(float || quantized) of the next-token
distribution ("kl"), 1 - cosine of embeddings ("cosine") or relative MSE ("mse"), averaged over
positions. Layers inside a stack of blocks (the ``nn.ModuleList`` of transformer layers) reuse the
cached float outputs of the blocks before their own, so a layer in block b only recomputes blocks
b..end: about half the work of full forwards on a 30-block model.

Candidates that calibrate on data (GPTQ-style weight rounding, static FP8 activation scales) are
measured out of sample, by two-fold cross-fitting: calibrated on the even batches and measured on
the odd ones, then the other way round. Measured on the batches they were fitted to, GPTQ's error
looked 10-16x smaller than the plans built from it turned out (SmolLM2, 256 proxy tokens against
576-1536 input features: bench/results/2026-11-25-cpu-plan-smollm2-int4gptq.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn as nn

from pyquant.block_cache import BlockCache
from pyquant.config import (
    Fp8Config,
    Int4Config,
    LayerConfig,
    QuantizeConfig,
    _layer_from_dict,
    _layer_to_dict,
)
from pyquant.modules import Fp8Linear, Int4Linear, QuantizedLinear

__all__ = [
    "Candidate",
    "resolve_candidates",
    "Sensitivity",
    "measure_sensitivity",
    "candidate_bytes",
    "Proxy",
    "OutputFn",
]

log = logging.getLogger("pyquant")

Proxy = Literal["kl", "cosine", "mse"]
OutputFn = Callable[[nn.Module, Any], torch.Tensor]


# --- candidates ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One precision a layer may get: a scheme name (as in the recipes: "fp8", "int4-b128", ...) and
    its layer config (None = keep float)."""

    name: str
    config: LayerConfig


def resolve_candidates(
    candidates: Sequence[str | Candidate | LayerConfig],
    parse: Callable[[str], LayerConfig] | None = None,
) -> list[Candidate]:
    """Names / configs -> Candidates. ``parse`` maps a scheme name to a layer config (default:
    ``pyquant.models.recipes.parse_scheme``; the recipe driver passes the recipe's own parser so that
    its tuned defaults and any scheme suffix it knows, e.g. ``int4-b128-gptq``, become candidates).
    "float" is always available as the fallback and is added when missing."""
    if parse is None:
        from pyquant.models.recipes import parse_scheme

        parse = parse_scheme
    if isinstance(candidates, str):
        candidates = [c for c in candidates.split(",") if c.strip()]
    out: dict[str, Candidate] = {}
    for c in candidates:
        if isinstance(c, Candidate):
            cand = c
        elif c is None or isinstance(c, (Int4Config, Fp8Config)):
            cand = Candidate("float" if c is None else _config_name(c), c)
        elif isinstance(c, str):
            try:
                cfg = parse(c.strip())
            except ValueError as e:
                raise ValueError(f"unknown candidate {c!r}: {e}") from None
            cand = Candidate("float" if cfg is None else c.strip().lower(), cfg)
        else:
            raise ValueError(f"a candidate must be a scheme name or a layer config, got {c!r}")
        if cand.name in out and out[cand.name].config != cand.config:
            raise ValueError(f"two different candidates are named {cand.name!r}")
        out[cand.name] = cand
    if "float" not in out:
        out["float"] = Candidate("float", None)
    if len(out) < 2:
        raise ValueError("give at least one quantized candidate (e.g. fp8, int4-b128)")
    return list(out.values())


def _config_name(cfg: Int4Config | Fp8Config) -> str:
    if isinstance(cfg, Int4Config):
        s = f"int4-b{cfg.block_size}" + ("" if cfg.symmetric else "-asym")
        if cfg.accuracy_level:  # scheme suffix -a8 (4); 1-3 have no scheme name
            s += "-a8" if cfg.accuracy_level == 4 else f"-acc{cfg.accuracy_level}"
    else:
        s = "fp8-channel" if cfg.weight_block_size == 0 else f"fp8-b{cfg.weight_block_size}"
        s += {"static": "-static", "none": "-wo"}.get(cfg.activation, "")
    return s + ("" if cfg.algorithm == "rtn" else f"-{cfg.algorithm}")


# --- sizes and quantizing one layer ------------------------------------------------------------------


def candidate_bytes(linear: nn.Linear, cfg: LayerConfig) -> int:
    """Weight bytes of ``linear`` under cfg (packed weight + scales + zero points; bias not counted,
    it is the same in every precision)."""
    if cfg is None:
        return linear.weight.numel() * linear.weight.element_size()
    cls = Int4Linear if isinstance(cfg, Int4Config) else Fp8Linear
    m = cls(linear.in_features, linear.out_features, cfg, False, linear.weight.dtype, "meta")
    return sum(b.numel() * b.element_size() for b in m.buffers())


def _skip_reason(name: str, model: nn.Module, cfg: LayerConfig) -> str | None:
    if cfg is None:
        return None
    from pyquant.quantize import _parent_and_attr, _skip_reason

    return _skip_reason(name, model.get_submodule(name), _parent_and_attr(model, name)[0], cfg)


def _quantize_one(
    model: nn.Module, name: str, cfg: Int4Config | Fp8Config, batches: Sequence[Any], output_fn: OutputFn
) -> None:
    """Swap layer ``name`` for what ``pyquant.quantize`` builds for it (same code path, so every
    algorithm and calibration option is honoured); calibration statistics, when the candidate needs
    them, are collected for this one layer on ``batches``."""
    from pyquant.quantize import quantize

    quantize(
        model,
        QuantizeConfig(default=None, overrides={name: cfg}),
        calibration_data=batches,
        forward_fn=lambda m, b: output_fn(m, b),
    )
    model.__dict__.pop("pyquant_summary", None)


def _quantize_with_stats(model: nn.Module, name: str, cfg: Int4Config | Fp8Config, stats: Any) -> None:
    """Swap layer ``name`` for its quantization with ``cfg`` fitted to given statistics."""
    from pyquant.quantize import QuantizeSummary, _replace_layer

    _replace_layer(model, name, model.get_submodule(name), cfg, stats, QuantizeSummary())


def _fit_statistics(
    model: nn.Module,
    modules: Mapping[str, nn.Module],
    todo: Sequence[tuple[str, Candidate]],
    fit_batches: list[Any],
    output_fn: OutputFn,
    progress: bool,
) -> dict[str, Any]:
    """Calibration statistics of the float model's layer inputs on the fit set, for every layer
    with a calibrated candidate to measure (the union of what its candidates need)."""
    from pyquant.quantize import _collect_stats, calibration_needs

    needs: dict[str, frozenset[str]] = {}
    for n, c in todo:
        if _calibrates(c.config):
            needs[n] = needs.get(n, frozenset()) | calibration_needs(c.config)
    if not needs:
        return {}
    if not fit_batches:
        raise ValueError("fit_batches is empty")
    return _collect_stats(model, {n: modules[n] for n in needs}, needs, fit_batches, output_fn, progress)


def _calibrates(cfg: LayerConfig) -> bool:
    """Whether quantizing with ``cfg`` fits anything to the calibration data."""
    from pyquant.quantize import calibration_needs

    return cfg is not None and bool(calibration_needs(cfg))


def _folds(n_batches: int, cfg: LayerConfig) -> list[tuple[list[int], list[int]]]:
    """(calibration batch indices, measured batch indices) pairs whose measured sets partition the
    batches: one in-sample pair for candidates that fit nothing (or with a single batch), else two
    folds (even / odd batches)."""
    every = list(range(n_batches))
    if n_batches < 2 or not _calibrates(cfg):
        return [(every, every)]
    even, odd = every[0::2], every[1::2]
    return [(odd, even), (even, odd)]


def _check_per_layer(cand: Candidate) -> None:
    cfg = cand.config
    try:
        from pyquant.awq import AWQ_ALGORITHMS
    except ImportError:  # older pyquant without AWQ
        AWQ_ALGORITHMS = ()  # noqa: N806
    if isinstance(cfg, Int4Config) and cfg.algorithm in AWQ_ALGORITHMS:
        raise ValueError(
            f"candidate {cand.name!r}: AWQ folds its scales into the preceding norms / linears (a "
            "model-wide pre-pass), so it cannot be measured per layer; use -mse or -gptq candidates"
        )


def _set_module(model: nn.Module, name: str, mod: nn.Module) -> None:
    parent_name, _, attr = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, attr, mod)


# --- sensitivity -------------------------------------------------------------------------------------------


@dataclass
class Sensitivity:
    """proxy[layer][candidate] (None where the candidate cannot be applied to the layer) and
    nbytes[layer][candidate] (weight bytes)."""

    proxy_kind: str
    candidates: list[Candidate]
    proxy: dict[str, dict[str, float | None]]
    nbytes: dict[str, dict[str, int]]
    shapes: dict[str, list[int]]
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)  # layer -> candidate -> reason
    tokens: int = 0
    seconds: float = 0.0
    # How calibrated candidates were fitted: "folds" (cross-fitted over the proxy batches) or
    # "fit set" (statistics of separate fit batches, fit_tokens of them). A ``known`` result's values
    # for calibrated candidates are reused only where it was fitted the same way.
    fit: str = "folds"
    fit_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "proxy_kind": self.proxy_kind,
            "candidates": {c.name: _layer_to_dict(c.config) for c in self.candidates},
            "proxy": self.proxy,
            "nbytes": self.nbytes,
            "shapes": self.shapes,
            "skipped": self.skipped,
            "tokens": self.tokens,
            "seconds": self.seconds,
            "fit": self.fit,
            "fit_tokens": self.fit_tokens,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Sensitivity:
        return cls(
            proxy_kind=d["proxy_kind"],
            candidates=[Candidate(k, _layer_from_dict(v)) for k, v in d["candidates"].items()],
            proxy={k: dict(v) for k, v in d["proxy"].items()},
            nbytes={k: dict(v) for k, v in d["nbytes"].items()},
            shapes={k: list(v) for k, v in d["shapes"].items()},
            skipped={k: dict(v) for k, v in d.get("skipped", {}).items()},
            tokens=int(d.get("tokens", 0)),
            seconds=float(d.get("seconds", 0.0)),
            fit=str(d.get("fit", "folds")),
            fit_tokens=int(d.get("fit_tokens", 0)),
        )


def _reference(out: torch.Tensor, proxy: str) -> torch.Tensor:
    out = out.detach().float()
    if proxy == "kl":
        return torch.log_softmax(out, dim=-1)
    return out


def _divergence(ref: torch.Tensor, out: torch.Tensor, proxy: str) -> tuple[float, int]:
    """(sum over positions, number of positions) of the proxy; positions = all dims but the last."""
    out = out.detach().float()
    if proxy == "kl":
        logq = torch.log_softmax(out, dim=-1)
        kl = (ref.exp() * (ref - logq)).sum(-1)
        return float(kl.sum()), kl.numel()
    if proxy == "cosine":
        cos = torch.nn.functional.cosine_similarity(out, ref, dim=-1)
        return float((1.0 - cos).sum()), cos.numel()
    if proxy == "mse":
        err = ((out - ref) ** 2).sum(-1) / (ref**2).sum(-1).clamp_min(1e-30)
        return float(err.sum()), err.numel()
    raise ValueError(f"unknown proxy {proxy!r}: use 'kl', 'cosine' or 'mse'")


def measure_sensitivity(
    model: nn.Module,
    candidates: Sequence[str | Candidate | LayerConfig],
    batches: Sequence[Any],
    output_fn: OutputFn,
    *,
    proxy: Proxy = "kl",
    layers: Sequence[str] | None = None,
    known: Sensitivity | None = None,
    reuse_blocks: bool = True,
    fit_batches: Sequence[Any] | None = None,
    progress: bool = True,
) -> Sensitivity:
    """Proxy cost of quantizing each layer alone with each candidate (see the module docstring).

    output_fn(model, batch) -> output tensor: logits [..., V] for "kl", embeddings [..., H] for
        "cosine" / "mse"; positions = all leading dims, averaged.
    layers: names of the nn.Linear layers to analyse (default: every nn.Linear).
    known: an earlier result; its values for the same (layer, candidate config) are reused.
    The model is left as it was (float); candidates that need calibration statistics (static FP8,
    GPTQ-style algorithms) are fitted on one half of ``batches`` and measured on the other, both ways
    round (two folds; in sample with a single batch).
    fit_batches: instead, fit those candidates on these batches (disjoint from ``batches``, passed to
    ``output_fn`` too) and measure them on all of ``batches``. The statistics of every layer's input
    are collected in one pass of the float model: with one layer quantized, every layer's input is
    the float model's. A large fit set is what GPTQ needs (its Hessian over K inputs overfits a few
    hundred tokens), and it costs one pass instead of a fit per layer and candidate.
    """
    if proxy not in ("kl", "cosine", "mse"):
        raise ValueError(f"unknown proxy {proxy!r}: use 'kl', 'cosine' or 'mse'")
    cands = resolve_candidates(candidates)
    for c in cands:
        _check_per_layer(c)
    if not batches:
        raise ValueError("measure_sensitivity needs at least one calibration batch")
    modules = dict(model.named_modules())
    if layers is None:
        layers = [n for n, m in modules.items() if isinstance(m, nn.Linear) and n]
    for n in layers:
        if not isinstance(modules.get(n), nn.Linear) or isinstance(modules.get(n), QuantizedLinear):
            raise ValueError(f"layer {n!r} is not a float nn.Linear of this model")
    t0 = time.perf_counter()
    sens = Sensitivity(proxy, cands, {}, {}, {}, fit="folds" if fit_batches is None else "fit set")
    todo: list[tuple[str, Candidate]] = []
    for n in layers:
        lin = modules[n]
        sens.shapes[n] = [lin.out_features, lin.in_features]
        sens.proxy[n], sens.nbytes[n] = {}, {}
        for c in cands:
            why = _skip_reason(n, model, c.config)
            if why is not None:
                sens.skipped.setdefault(n, {})[c.name] = why
                sens.proxy[n][c.name] = None
                continue
            sens.nbytes[n][c.name] = candidate_bytes(lin, c.config)
            if c.config is None:
                sens.proxy[n][c.name] = 0.0
                continue
            old = _known_value(known, n, c, proxy)
            if old is not None and _calibrates(c.config) and known is not None and known.fit != sens.fit:
                old = None  # fitted another way: measure again
            if old is not None:
                sens.proxy[n][c.name] = old
            else:
                todo.append((n, c))
    if not todo:
        sens.seconds = known.seconds if known else 0.0
        sens.tokens = known.tokens if known else 0
        return sens

    batches = list(batches)
    cache = BlockCache(model, layers) if reuse_blocks else BlockCache(nn.Module(), [])
    refs: list[torch.Tensor] = []
    with torch.inference_mode():
        for i, b in enumerate(batches):
            with cache.record(i):
                refs.append(_reference(output_fn(model, b), proxy))
        # replaying every block from the cache must give the float output (else replay is disabled)
        cache.replays(0, lambda: _reference(output_fn(model, batches[0]), proxy), refs[0])
    sens.tokens = sum(int(r.numel() // r.shape[-1]) for r in refs)

    fit_stats: dict[str, Any] = {}
    if fit_batches is not None:
        fit_stats = _fit_statistics(model, modules, todo, list(fit_batches), output_fn, progress)
        sens.fit_tokens = max((st.n_tokens for st in fit_stats.values()), default=0)

    # Later blocks first: with reuse, they are the cheapest, so the progress bar's rate settles early.
    todo.sort(key=lambda t: -cache.block(t[0]))
    it: Any = todo
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(todo, desc=f"sensitivity ({proxy})", unit="layer-cand")
    if fit_batches is None and len(batches) < 2 and any(_calibrates(c.config) for _, c in todo):
        log.warning("pyquant planner: one calibration batch: calibrated candidates are measured in sample")
    for n, c in it:
        lin = modules[n]
        total, count = 0.0, 0
        fitted = n in fit_stats and _calibrates(c.config)  # fitted on the fit set, measured on all
        folds = [([], list(range(len(batches))))] if fitted else _folds(len(batches), c.config)
        for fit, measure in folds:
            if fitted:
                _quantize_with_stats(model, n, c.config, fit_stats[n])
            else:
                _quantize_one(model, n, c.config, [batches[i] for i in fit], output_fn)
            try:
                with torch.inference_mode():
                    for i in measure:
                        with cache.skip(i, cache.block(n)):
                            s, k = _divergence(refs[i], output_fn(model, batches[i]), proxy)
                        total, count = total + s, count + k
            finally:
                _set_module(model, n, lin)
        # KL / 1-cos / MSE are >= 0; tiny negatives are float rounding.
        sens.proxy[n][c.name] = max(total / max(count, 1), 0.0)
    sens.seconds = time.perf_counter() - t0 + (known.seconds if known else 0.0)
    return sens


def _known_value(known: Sensitivity | None, layer: str, cand: Candidate, proxy: str) -> float | None:
    if known is None or known.proxy_kind != proxy:
        return None
    for k in known.candidates:
        if k.config == cand.config:
            v = known.proxy.get(layer, {}).get(k.name)
            return None if v is None else float(v)
    return None
