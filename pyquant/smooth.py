"""SmoothQuant-style activation smoothing, folded into the float model (no extra runtime op).

    report = smooth_model(model, calib_batches, alpha=0.5)   # mutates the float model
    model = pyquant.quantize(model, Fp8Config())

A linear layer y = x W^T is unchanged if its input channel j is divided by s_j and weight column j
multiplied by s_j. With s_j = max|x_j|^alpha / max|W[:, j]|^(1 - alpha) (statistics over calibration
tokens; max|W| over every layer reading x), outlier channels of x shrink, so a per-token FP8 scale is no
longer set by a few channels while the other channels fall into e4m3 subnormals or flush to zero.
The 1/s_j is folded into the op that produces x, so the exported graph is the same as without smoothing:

* Llama-style decoders (llama, mistral, qwen2, qwen3): ``input_layernorm.weight`` -> q/k/v_proj;
  ``post_attention_layernorm.weight`` -> gate/up_proj; ``v_proj`` output rows -> ``o_proj`` input
  (attention is linear in v; with grouped-query attention one kv channel feeds the o_proj channel of
  every query head in its group, so s is shared: the max of the group's statistics); ``up_proj`` output
  rows -> ``down_proj`` input (down's input is act(gate) * up, linear in up).
* BERT-style encoders (bert, roberta, xlm-roberta): only ``attention.self.value`` -> ``attention.output.
  dense``. These are post-LN models: a LayerNorm's output is also the residual stream of the next
  sub-block, so folding 1/s into it would change the function; ``intermediate.dense`` -> ``output.dense``
  goes through GELU. Neither is smoothed.

``alpha`` is a float (one migration strength for every group) or ``"auto"``: per group, the alpha of
``AUTO_ALPHAS`` that minimises the simulated FP8 output error of the group's layers on the calibration
data (weights per-channel RTN e4m3, activations per-token dynamic, i.e. the LinearFp8 numerics).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from pyquant.quantize import _call_model

__all__ = ["SmoothGroup", "SmoothReport", "smooth_model", "find_smooth_groups", "AUTO_ALPHAS"]

LLAMA_TYPES = ("llama", "mistral", "qwen2", "qwen3")
BERT_TYPES = ("bert", "roberta", "xlm-roberta")
AUTO_ALPHAS: tuple[float, ...] = (0.0, 0.2, 0.35, 0.5, 0.65, 0.8)
_S_MIN, _S_MAX = 1e-5, 1e5


@dataclass
class SmoothGroup:
    """One fold: ``prev`` produces the input channels of ``linears`` (all reading the same x).

    kind: "norm" (prev is an RMSNorm/LayerNorm: weight (and bias) divided by s), or "linear" (prev is
    an nn.Linear whose output rows are divided by s). ``expand``: for GQA v -> o, index [K_o] mapping
    each o_proj input channel to its v_proj output row (s is per v row).
    """

    name: str
    kind: str
    prev: nn.Module
    prev_name: str
    linears: list[tuple[str, nn.Linear]]
    expand: torch.Tensor | None = None
    # filled by smooth_model
    alpha: float | None = None
    act_max_before: float = 0.0
    act_max_after: float = 0.0
    s_min: float = 1.0
    s_max: float = 1.0


@dataclass
class SmoothReport:
    architecture: str
    alpha: float | str
    n_tokens: int
    groups: list[SmoothGroup] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # group -> why it was not smoothed

    def table(self) -> str:
        rows = [
            f"{'group':44s} {'alpha':>5s} {'s min':>9s} {'s max':>9s} {'max|x| before':>14s} {'after':>9s}"
        ]
        for g in self.groups:
            rows.append(
                f"{g.name:44s} {g.alpha:5.2f} {g.s_min:9.3g} {g.s_max:9.3g} "
                f"{g.act_max_before:14.4g} {g.act_max_after:9.4g}"
            )
        rows += [f"{n:44s} not smoothed: {why}" for n, why in self.skipped.items()]
        return "\n".join(rows)


# --- architecture -> fold groups ------------------------------------------------------------------


def _model_type(model: nn.Module) -> str:
    cfg = getattr(model, "config", None)
    return str(getattr(cfg, "model_type", "") or "")


def _attn_heads(model: nn.Module, attn: nn.Module) -> tuple[int, int]:
    """-> (num_attention_heads, num_key_value_heads)."""
    cfg = getattr(attn, "config", None) or getattr(model, "config", None)
    nh = getattr(cfg, "num_attention_heads", None)
    nkv = getattr(cfg, "num_key_value_heads", None) or nh
    if not nh:
        raise ValueError("cannot determine the attention head count (no config.num_attention_heads)")
    return int(nh), int(nkv)


def find_smooth_groups(model: nn.Module) -> tuple[str, list[SmoothGroup]]:
    """-> (architecture family, fold groups) for a supported HF model; ValueError otherwise."""
    mt = _model_type(model)
    groups: list[SmoothGroup] = []
    if mt in LLAMA_TYPES:
        for name, layer in model.named_modules():
            if not all(
                hasattr(layer, a) for a in ("input_layernorm", "post_attention_layernorm", "self_attn", "mlp")
            ):
                continue
            at, mlp = layer.self_attn, layer.mlp
            p = f"{name}." if name else ""
            q, k, v, o = (getattr(at, a, None) for a in ("q_proj", "k_proj", "v_proj", "o_proj"))
            g_, u, d = (getattr(mlp, a, None) for a in ("gate_proj", "up_proj", "down_proj"))
            if not all(isinstance(m, nn.Linear) for m in (q, k, v, o, g_, u, d)):
                raise ValueError(f"{p[:-1]}: not a Llama-style layer (q/k/v/o_proj, gate/up/down_proj)")
            groups.append(
                SmoothGroup(
                    f"{p}self_attn.qkv",
                    "norm",
                    layer.input_layernorm,
                    f"{p}input_layernorm",
                    [(f"{p}self_attn.q_proj", q), (f"{p}self_attn.k_proj", k), (f"{p}self_attn.v_proj", v)],
                )
            )
            nh, nkv = _attn_heads(model, at)
            hd = o.in_features // nh
            if v.out_features != nkv * hd or o.in_features != nh * hd:
                raise ValueError(
                    f"{p}self_attn: v_proj/o_proj shapes do not match {nh} heads / {nkv} kv heads"
                )
            # o_proj input channel h*hd + d reads kv head h // (nh // nkv), dim d (repeat_kv)
            heads = torch.arange(nh).repeat_interleave(hd) // (nh // nkv)
            expand = heads * hd + torch.arange(hd).repeat(nh)
            groups.append(
                SmoothGroup(
                    f"{p}self_attn.o_proj",
                    "linear",
                    v,
                    f"{p}self_attn.v_proj",
                    [(f"{p}self_attn.o_proj", o)],
                    expand,
                )
            )
            groups.append(
                SmoothGroup(
                    f"{p}mlp.gate_up",
                    "norm",
                    layer.post_attention_layernorm,
                    f"{p}post_attention_layernorm",
                    [(f"{p}mlp.gate_proj", g_), (f"{p}mlp.up_proj", u)],
                )
            )
            groups.append(
                SmoothGroup(f"{p}mlp.down_proj", "linear", u, f"{p}mlp.up_proj", [(f"{p}mlp.down_proj", d)])
            )
        family = "llama"
    elif mt in BERT_TYPES:
        for name, mod in model.named_modules():
            sa = getattr(getattr(mod, "attention", None), "self", None)
            out = getattr(getattr(mod, "attention", None), "output", None)
            if sa is None or out is None or not hasattr(mod, "intermediate"):
                continue
            v, o = getattr(sa, "value", None), getattr(out, "dense", None)
            if not (
                isinstance(v, nn.Linear) and isinstance(o, nn.Linear) and v.out_features == o.in_features
            ):
                raise ValueError(
                    f"{name}: not a BERT-style layer (attention.self.value -> attention.output.dense)"
                )
            p = f"{name}." if name else ""
            groups.append(
                SmoothGroup(
                    f"{p}attention.output.dense",
                    "linear",
                    v,
                    f"{p}attention.self.value",
                    [(f"{p}attention.output.dense", o)],
                )
            )
        family = "bert"
    else:
        raise ValueError(
            f"smoothing supports HF model types {LLAMA_TYPES + BERT_TYPES}, "
            f"got {mt or type(model).__name__!r}: the foldable norm/linear pairs are architecture-specific"
        )
    if not groups:
        raise ValueError(f"model type {mt!r}: found no layers to smooth (unexpected module names)")
    return family, groups


# --- statistics -------------------------------------------------------------------------------------


def _run(model: nn.Module, batches: Iterable[Any], forward_fn: Callable | None) -> None:
    with torch.no_grad():
        for b in batches:
            (forward_fn or _call_model)(model, b)


def _fp8_sim(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """LinearFp8 numerics (per-channel RTN weights, dynamic per-token activations), float32."""
    from pyquant import torch_ops
    from pyquant.layout import FP8_E4M3_MAX

    amax = w.abs().amax(dim=1, keepdim=True)
    ws = torch.where(amax > 0, amax / FP8_E4M3_MAX, torch.ones_like(amax))
    wq = (w / ws).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).float() * ws
    xq, sx = torch_ops.quantize_activations_fp8(x, None)
    return (xq.float() @ wq.t()) * sx


def _scales(act_max: torch.Tensor, w_max: torch.Tensor, alpha: float) -> torch.Tensor:
    a = act_max.clamp(min=1e-5)
    w = w_max.clamp(min=1e-5)
    s = a.pow(alpha) / w.pow(1 - alpha)
    s = torch.where(act_max > 0, s, torch.ones_like(s))
    return s.clamp(_S_MIN, _S_MAX)


def _group_w_max(g: SmoothGroup) -> torch.Tensor:
    """max |W[:, j]| over the group's layers, per input channel [K] (or per v row for GQA)."""
    wm = torch.stack([lin.weight.detach().abs().float().amax(dim=0) for _, lin in g.linears]).amax(0)
    if g.expand is not None:
        wm = torch.zeros(int(g.expand.max()) + 1).scatter_reduce(0, g.expand, wm, "amax", include_self=False)
    return wm


def _reduce(g: SmoothGroup, per_in: torch.Tensor) -> torch.Tensor:
    """[K of the consumers] -> [channels of prev] (max over a GQA group)."""
    if g.expand is None:
        return per_in
    return torch.zeros(int(g.expand.max()) + 1).scatter_reduce(
        0, g.expand, per_in, "amax", include_self=False
    )


def _expand(g: SmoothGroup, s: torch.Tensor) -> torch.Tensor:
    return s if g.expand is None else s[g.expand]


# --- folding -------------------------------------------------------------------------------------------


@torch.no_grad()
def _fold(g: SmoothGroup, s: torch.Tensor) -> None:
    """prev's output channel c /= s[c]; consumers' weight column j *= s_in[j]."""
    if g.kind == "norm":
        w = getattr(g.prev, "weight", None)
        if not isinstance(w, torch.Tensor) or w.shape != s.shape:
            raise ValueError(f"{g.prev_name}: expected a norm with a weight of shape {tuple(s.shape)}")
        w.div_(s.to(w.dtype))
        b = getattr(g.prev, "bias", None)
        if isinstance(b, torch.Tensor):
            b.div_(s.to(b.dtype))
    else:
        lin = g.prev
        lin.weight.div_(s.to(lin.weight.dtype).unsqueeze(1))
        if lin.bias is not None:
            lin.bias.div_(s.to(lin.bias.dtype))
    s_in = _expand(g, s)
    for _, lin in g.linears:
        lin.weight.mul_(s_in.to(lin.weight.dtype).unsqueeze(0))


def _check_norm_is_scalable(g: SmoothGroup) -> str | None:
    """A norm must compute (...) * weight (+ bias) so that dividing weight/bias by s divides its output
    by s (not e.g. Gemma's (1 + weight)). Probed numerically; None if fine, else the reason."""
    if g.kind != "norm":
        return None
    w = g.prev.weight
    x = torch.randn(4, w.shape[0], generator=torch.Generator().manual_seed(0)).to(w.dtype)
    s = torch.linspace(0.5, 2.0, w.shape[0], dtype=w.dtype)
    with torch.no_grad():
        y0 = g.prev(x)
        old_w, old_b = w.clone(), None if getattr(g.prev, "bias", None) is None else g.prev.bias.clone()
        w.div_(s)
        if old_b is not None:
            g.prev.bias.div_(s)
        y1 = g.prev(x)
        w.copy_(old_w)
        if old_b is not None:
            g.prev.bias.copy_(old_b)
    if not torch.allclose(y1 * s, y0, rtol=1e-4, atol=1e-5):
        return f"{type(g.prev).__name__} output does not scale with its weight"
    return None


# --- the pass --------------------------------------------------------------------------------------------


def smooth_model(
    model: nn.Module,
    calib_batches: Sequence[Any],
    alpha: float | str = 0.5,
    *,
    forward_fn: Callable[[nn.Module, Any], Any] | None = None,
    layer_filter: Callable[[str], bool] | None = None,
    alphas: Sequence[float] = AUTO_ALPHAS,
) -> SmoothReport:
    """Smooth ``model`` in place (see module docstring); the float function is unchanged up to
    float rounding.

    calib_batches: a re-iterable of batches (model(**b), model(*b) or model(b), or forward_fn(model, b)).
    alpha: migration strength in [0, 1], or "auto" (per group, chosen from ``alphas``).
    layer_filter: a group is smoothed only if ``layer_filter(name)`` is True for one of its consumer
        layers (e.g. only the layers that will be FP8-quantized).
    """
    if isinstance(alpha, str):
        if alpha != "auto":
            raise ValueError(f"alpha must be a float in [0, 1] or 'auto', got {alpha!r}")
    elif not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    if isinstance(calib_batches, Iterable) and not isinstance(calib_batches, Sequence):
        calib_batches = list(calib_batches)
    family, groups = find_smooth_groups(model)
    report = SmoothReport(family, alpha, 0)
    todo: list[SmoothGroup] = []
    for g in groups:
        if layer_filter is not None and not any(layer_filter(n) for n, _ in g.linears):
            report.skipped[g.name] = "no consumer layer selected"
            continue
        why = _check_norm_is_scalable(g)
        if why is not None:
            raise ValueError(f"cannot fold smoothing scales into {g.prev_name}: {why}")
        todo.append(g)
    if not todo:
        return report

    # pass 1: per-input-channel max |x| of each group (all consumers read the same x)
    act_max: dict[str, torch.Tensor] = {}
    n_tok = [0]

    def stat_hook(g: SmoothGroup, first: bool):  # noqa: ANN202
        def hook(mod: nn.Module, args: tuple) -> None:
            x = args[0].detach().reshape(-1, mod.in_features).float()
            m = x.abs().amax(0)
            act_max[g.name] = m if g.name not in act_max else torch.maximum(act_max[g.name], m)
            if first:
                n_tok[0] += x.shape[0]

        return hook

    handles = [g.linears[0][1].register_forward_pre_hook(stat_hook(g, i == 0)) for i, g in enumerate(todo)]
    try:
        _run(model, calib_batches, forward_fn)
    finally:
        for h in handles:
            h.remove()
    if n_tok[0] == 0:
        raise ValueError("smoothing: the calibration data produced no tokens")
    report.n_tokens = n_tok[0]

    # candidate scales per group
    cands: dict[str, list[tuple[float, torch.Tensor]]] = {}
    for g in todo:
        if g.name not in act_max:
            raise ValueError(f"smoothing: {g.linears[0][0]} saw no calibration tokens")
        am, wm = _reduce(g, act_max[g.name]), _group_w_max(g)
        grid = list(alphas) if alpha == "auto" else [float(alpha)]
        cands[g.name] = [(a, _scales(am, wm, a)) for a in grid]

    # pass 2 (auto only): simulated FP8 output error of each candidate, summed over calibration tokens
    if alpha == "auto":
        errs = {g.name: torch.zeros(len(cands[g.name]), dtype=torch.float64) for g in todo}
        wts = {g.name: [torch.cat([lin.weight.detach().float() for _, lin in g.linears])] for g in todo}

        def err_hook(g: SmoothGroup):  # noqa: ANN202
            def hook(mod: nn.Module, args: tuple) -> None:
                x = args[0].detach().reshape(-1, mod.in_features).float()
                w = wts[g.name][0]
                ref = x @ w.t()
                for i, (_, s) in enumerate(cands[g.name]):
                    si = _expand(g, s)
                    errs[g.name][i] += float((_fp8_sim(x / si, w * si) - ref).pow(2).sum())

            return hook

        handles = [g.linears[0][1].register_forward_pre_hook(err_hook(g)) for g in todo]
        try:
            _run(model, calib_batches, forward_fn)
        finally:
            for h in handles:
                h.remove()
        chosen = {g.name: cands[g.name][int(torch.argmin(errs[g.name]))] for g in todo}
    else:
        chosen = {g.name: cands[g.name][0] for g in todo}

    for g in todo:
        a, s = chosen[g.name]
        g.alpha = a
        g.s_min, g.s_max = float(s.min()), float(s.max())
        g.act_max_before = float(act_max[g.name].max())
        g.act_max_after = float((act_max[g.name] / _expand(g, s)).max())
        _fold(g, s)
        report.groups.append(g)
    return report
