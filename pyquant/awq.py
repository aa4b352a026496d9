"""AWQ-style activation-aware scaling for INT4 weights (Lin et al. 2023), folded into the float model.

Run by ``pyquant.quantize`` for layers with ``Int4Config(algorithm="awq" | "awq-gptq")``, before any
weight is quantized (like ``QuantizeConfig.smoothing``):

    y = x W^T = (x / s) (W diag(s))^T

Input channels that carry large activations matter most for the output error; multiplying their
weight columns by s_j > 1 before block-wise INT4 rounding gives them relatively finer steps (the block
scale is set by the block's largest |w|, so the other columns of the block pay a little). The 1/s_j is
folded into the op producing x, exactly as SmoothQuant smoothing is (``pyquant.smooth``: the same fold
groups: norms before q/k/v and gate/up, v -> o, up -> down for Llama/Qwen/Mistral; v -> attention
output for BERT), so the exported graph has no extra op.

Per group, s = abs_mean(x)^alpha (normalised to a geometric mean of ~1), with alpha from a grid in
[0, 1] minimising sum over the group's layers of ||X W^T - (X / s) Q(W diag(s))^T||^2 over every
calibration token, through the input's H = sum x x^T (Q: the layer's INT4 round-to-nearest). alpha = 0
(no scaling) is a candidate, so a group is never made worse on that measure. Layers of no foldable
group (e.g. BERT's q/k, intermediate and output dense, or unsupported architectures) keep the plain
clipping search of the "awq" quantizer and are logged.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from pyquant.config import Int4Config
from pyquant.int4_algorithms import fake_quantize_int4
from pyquant.quantize import _stats_by_block
from pyquant.smooth import SmoothGroup, _check_norm_is_scalable, _fold, find_smooth_groups

__all__ = ["AwqReport", "awq_model", "AWQ_ALGORITHMS", "search_awq_scale"]

log = logging.getLogger("pyquant")

AWQ_ALGORITHMS = frozenset({"awq", "awq-gptq"})
_S_MIN, _S_MAX = 1e-4, 1e4


@dataclass
class AwqReport:
    architecture: str
    n_tokens: int = 0
    groups: dict[str, float] = field(default_factory=dict)  # group -> chosen alpha
    error_ratio: dict[str, float] = field(default_factory=dict)  # group -> proxy error vs alpha 0
    unscaled: dict[str, str] = field(default_factory=dict)  # awq layer -> why it got no scale migration

    def table(self) -> str:
        rows = [f"{'group':44s} {'alpha':>5s} {'err / err(rtn)':>15s}"]
        rows += [f"{g:44s} {a:5.2f} {self.error_ratio[g]:15.3f}" for g, a in self.groups.items()]
        rows += [f"{n:44s} clipping search only: {why}" for n, why in self.unscaled.items()]
        return "\n".join(rows)


def search_awq_scale(
    hessian: torch.Tensor,
    abs_mean: torch.Tensor,
    layers: Sequence[tuple[torch.Tensor, Int4Config]],
    n_grid: int = 11,
    expand: torch.Tensor | None = None,
) -> tuple[float, torch.Tensor, float]:
    """-> (alpha, s over abs_mean's channels, proxy error / proxy error at alpha 0).

    hessian [K, K]: sum of x x^T over every calibration token of the layers' input; abs_mean: mean
    |x| per channel of the producing op ([K], or per v row with ``expand`` mapping each of the K
    inputs to one of them); layers: (float weight [N, K], config) of every consumer. The proxy is the
    group's output error over all calibration tokens, sum ||X dW^T||^2 = sum tr(dW H dW^T), with
    dW = W - Q(W diag(s)) diag(1/s) and Q block-wise round-to-nearest.

    Why all tokens through H rather than X itself: the search used to run on a random sample of 512
    tokens, and with 64 calibration sequences instead of 4 (8 instead of 128 tokens drawn per
    sequence) AWQ got worse on SmolLM2 (block 64 asym +16.7 % against +13.5 %); with H over all of
    them, +14.1 %. Q stays RTN: matching it to the final quantizer (GPTQ for "awq-gptq", the clipping
    search for "awq") picked smaller alphas and scored worse or even (+9.3 % against +7.7 % for
    awq-gptq act-order; bench/results/2026-11-26-cpu-s29-smollm2-awq-proxy.md)."""
    h = hessian.detach().double().cpu()
    refs = [(w.float(), c) for w, c in layers]
    am = abs_mean.detach().float().cpu().clamp(min=1e-8)
    best: tuple[float, torch.Tensor, float] | None = None
    err0 = None
    for i in range(n_grid):
        alpha = i / max(n_grid - 1, 1)
        s = am.pow(alpha)
        s = (s / math.sqrt(float(s.max()) * float(s.min()))).clamp(_S_MIN, _S_MAX)
        s_in = (s if expand is None else s[expand]).double()
        err = 0.0
        for w, c in refs:
            # dW = W - Q(W diag(s)) diag(1/s): the layer's output error is X dW^T
            wq = fake_quantize_int4(w * s_in.float(), c.block_size, c.symmetric)
            dw = w.double() - wq.double() / s_in
            err += float(((dw @ h) * dw).sum())
        if err0 is None:
            err0 = err
        if best is None or err < best[2]:
            best = (alpha, s, err)
    assert best is not None and err0 is not None
    return best[0], best[1], best[2] / err0 if err0 > 0 else 1.0


def _reduce_mean(g: SmoothGroup, per_in: torch.Tensor) -> torch.Tensor:
    """[K of the consumers] -> [channels of prev]: for GQA v -> o, the mean over the query heads
    reading one v row (they all share its scale)."""
    if g.expand is None:
        return per_in
    n = int(g.expand.max()) + 1
    tot = torch.zeros(n).index_add_(0, g.expand, per_in)
    cnt = torch.zeros(n).index_add_(0, g.expand, torch.ones_like(per_in))
    return tot / cnt.clamp(min=1)


def awq_model(
    model: nn.Module,
    calib_batches: Sequence[Any],
    layer_configs: Mapping[str, Int4Config],
    *,
    forward_fn: Callable[[nn.Module, Any], Any] | None = None,
    n_grid: int = 11,
    progress: bool = False,
) -> AwqReport:
    """Scale and fold every group whose consumers are all in ``layer_configs`` (the INT4 AWQ layers);
    mutates the float model (its function is unchanged up to float rounding). Memory: one float32
    [K, K] sum of x x^T per group of the block being calibrated (of every group where the blocks do
    not replay, see ``quantize._stats_by_block``)."""
    calib_batches = list(calib_batches)
    if not calib_batches:
        raise ValueError("awq: calibration_data is empty: AWQ needs at least one batch")
    try:
        family, groups = find_smooth_groups(model)
    except ValueError as e:
        family, groups = "unsupported", []
        log.warning("pyquant awq: no scale migration (%s); AWQ layers get the clipping search only", e)
    report = AwqReport(family)
    todo: list[SmoothGroup] = []
    for g in groups:
        names = [n for n, _ in g.linears]
        if not any(n in layer_configs for n in names):
            continue
        if not all(n in layer_configs for n in names):
            why = f"group {g.name} also feeds layers that are not AWQ INT4"
        else:
            why = _check_norm_is_scalable(g)
        if why is not None:
            for n in names:
                if n in layer_configs:
                    report.unscaled[n] = why
            continue
        todo.append(g)
    covered = {n for g in todo for n, _ in g.linears}
    for n in layer_configs:
        if n not in covered and n not in report.unscaled:
            report.unscaled[n] = "no foldable preceding op"
    for n, why in report.unscaled.items():
        log.info("pyquant awq: %s: %s", n, why)
    if not todo:
        return report

    bar: Any = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="awq scales", unit="group")
    # Block by block where the model's blocks replay (quantize._stats_by_block): only one block's
    # groups hold their [K, K] x^T x at once (a 7B Llama: ~0.7 GB instead of ~22 GB), at about one
    # pass's cost. The model a later block sees has the earlier blocks' scales folded in: the same
    # function up to float rounding. Each group's input is its first layer's: that layer's abs-mean
    # and x^T x.
    by_name = {g.name: g for g in todo}
    units = {g.name: [n for n, _ in g.linears] for g in todo}
    firsts = {g.name: g.linears[0] for g in todo}
    first_layers = dict(firsts.values())
    needs = {first: frozenset({"abs_mean", "hessian"}) for first in first_layers}
    for keys, stats in _stats_by_block(model, units, first_layers, needs, calib_batches, forward_fn, False):
        for g in (by_name[k] for k in keys):
            st = stats.pop(firsts[g.name][0])
            report.n_tokens = max(report.n_tokens, st.n_tokens)
            am = _reduce_mean(g, st.abs_mean.float().cpu())
            layers = [(lin.weight.detach().float().cpu(), layer_configs[n]) for n, lin in g.linears]
            alpha, s, ratio = search_awq_scale(st.hessian, am, layers, n_grid, g.expand)
            report.groups[g.name] = alpha
            report.error_ratio[g.name] = ratio
            if alpha > 0:
                _fold(g, s.to(g.linears[0][1].weight.device))
            if bar is not None:
                bar.update()
    if bar is not None:
        bar.close()
    return report
