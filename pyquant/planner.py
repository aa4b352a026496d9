"""Per-layer mixed precision under an accuracy budget: sensitivity analysis, planner, plan files.

    sens = measure_sensitivity(model, candidates, batches, output_fn, proxy="kl")
    plan = make_plan(sens, budget=0.01, verify=verify_torch, verify_final=verify_ort)
    plan.save("plan.json");  qcfg = Plan.load("plan.json").quantize_config(model)

1. **Sensitivity.** For every quantizable layer and every candidate precision, quantize only that layer
   (in place, eager numerics of the op modules), run a small calibration set and compare the model's
   outputs with the float outputs on a cheap proxy: KL(float || quantized) of the next-token
   distribution ("kl"), 1 - cosine of embeddings ("cosine") or relative MSE ("mse"). Float outputs are
   computed once; layers inside a stack of blocks (``nn.ModuleList`` of transformer layers) reuse the
   cached float outputs of the blocks before them, so a layer in block b only recomputes blocks b..end.
2. **Plan.** Assuming the per-layer proxies add up, the cheapest way to save bytes is the multiple-choice
   knapsack greedy: per layer, the lower convex hull of (bytes, proxy) over its candidates gives steps
   "move this layer one precision down"; all steps sorted by proxy cost per byte saved form one *path*
   from all-float to everything at the smallest candidate. The proxy predicts where the path crosses the
   budget (for "kl", a perplexity ratio of exp(sum KL): for a calibrated LM the expected extra NLL per
   token is exactly the KL); that point is then **verified** with the real metric (``verify``, e.g.
   torch eager perplexity) and the search moves along the path (rescaling the proxy by the measured /
   predicted ratio, then bisecting) to the most compressed point that verifies within budget. A final
   check (``verify_final``, e.g. the exported model in ONNX Runtime) backs off further -- undoing the
   last, most sensitive-per-byte steps -- until it too is within budget.
3. **Plan file.** JSON with the model, budget, candidates, per-layer choice, proxy values, verified
   metrics and pyquant version; ``Plan.quantize_config()`` turns it into a QuantizeConfig with one
   override per layer, so a saved plan is reapplied exactly.

The driver for the built-in models (their data and metric, verification in torch eager and in ONNX
Runtime) is ``pyquant.eval.plan_model``; the command line is ``pyquant plan``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.nn as nn

from pyquant.config import Int4Config, LayerConfig, QuantizeConfig, _layer_from_dict, _layer_to_dict
from pyquant.sensitivity import (
    Candidate,
    Sensitivity,
    candidate_bytes,
    measure_sensitivity,
    resolve_candidates,
)

__all__ = [
    "Candidate",
    "resolve_candidates",
    "parse_budget",
    "Sensitivity",
    "measure_sensitivity",
    "Verification",
    "Plan",
    "make_plan",
    "candidate_bytes",
    "PLAN_FORMAT",
]

log = logging.getLogger("pyquant")

PLAN_FORMAT = "pyquant-plan-1"


# --- budget ---------------------------------------------------------------------------


def parse_budget(budget: str | float) -> float:
    """ "1%" -> 0.01, "0.01" -> 0.01. A relative degradation, in [0, 1)."""
    s = str(budget).strip()
    try:
        v = float(s[:-1]) / 100.0 if s.endswith("%") else float(s)
    except ValueError:
        raise ValueError(f"budget {budget!r} is not a number (write e.g. 1% or 0.01)") from None
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"budget must be >= 0, got {budget!r}")
    if v >= 1:
        raise ValueError(f"budget {budget!r} is >= 100 %; write a fraction (0.02) or a percentage (2%)")
    return v


# --- the planner --------------------------------------------------------------------------------------------


@dataclass
class Verification:
    """A real-metric measurement of one assignment: degradation (relative, > 0 = worse; the budget
    applies to it), the metric values and where they were measured."""

    degradation: float
    values: dict[str, float] = field(default_factory=dict)
    runtime: str = "torch"


VerifyFn = Callable[[QuantizeConfig], Verification]


@dataclass
class _Step:
    layer: str
    to: str
    saved: int  # bytes saved by the step
    cost: float  # proxy increase


def _greedy_path(sens: Sensitivity, fallback: dict[str, str]) -> list[_Step]:
    """Steps of the multiple-choice knapsack greedy (see the module docstring)."""
    steps: list[_Step] = []
    for layer, costs in sens.proxy.items():
        start = fallback[layer]
        b0, c0 = sens.nbytes[layer][start], costs[start] or 0.0
        # (bytes saved, proxy cost) of every option that saves bytes; the cheapest per size
        best: dict[int, tuple[float, str]] = {}
        for c, v in costs.items():
            if v is not None and sens.nbytes[layer][c] < b0:
                s = b0 - sens.nbytes[layer][c]
                if s not in best or v < best[s][0]:
                    best[s] = (v, c)
        # lower convex hull from (0, c0): the cost per byte saved increases along it, so the
        # global sort below keeps each layer's steps in order
        hull: list[tuple[int, float, str]] = [(0, c0, start)]
        for s in sorted(best):
            v, c = best[s]
            while len(hull) >= 2:
                (x1, y1, _), (x2, y2, _) = hull[-2], hull[-1]
                if (x2 - x1) * (v - y1) - (y2 - y1) * (s - x1) <= 0:
                    hull.pop()
                else:
                    break
            hull.append((s, v, c))
        for (x1, y1, _), (x2, y2, name) in zip(hull, hull[1:], strict=False):
            steps.append(_Step(layer, name, x2 - x1, max(y2 - y1, 0.0)))
    steps.sort(key=lambda st: (st.cost / st.saved, -st.saved, st.layer))
    return steps


def _assignment(fallback: dict[str, str], steps: Sequence[_Step], k: int) -> dict[str, str]:
    a = dict(fallback)
    for s in steps[:k]:
        a[s.layer] = s.to
    return a


def predicted_degradation(proxy_kind: str, total: float) -> float:
    """Proxy sum -> predicted relative degradation of the model metric."""
    if proxy_kind == "kl":  # perplexity ratio exp(extra NLL); extra NLL ~ KL for a calibrated model
        return math.expm1(min(total, 50.0))
    return total  # 1 - cosine and relative MSE add up


@dataclass
class Plan:
    """A per-layer precision choice; see the module docstring. ``layers[name]`` is a candidate name."""

    model: str
    budget: float
    candidates: list[Candidate]
    layers: dict[str, str]
    sensitivity: Sensitivity
    exclude: list[str] = field(default_factory=list)  # recipe layers never planned (kept float)
    metric: str = ""
    float_value: float | None = None
    verified: dict[str, dict[str, Any]] = field(default_factory=dict)  # runtime -> Verification dict
    history: list[dict[str, Any]] = field(default_factory=list)
    predicted: float = 0.0
    within_budget: bool | None = None
    info: dict[str, Any] = field(default_factory=dict)  # version, command, git commit, times
    # AWQ scales folded into the float model before the layers are quantized (planned with AWQ
    # candidates): every planned layer's group, searched as INT4 with this config
    awq_prescale: Int4Config | None = None

    def config_of(self, name: str) -> LayerConfig:
        return {c.name: c.config for c in self.candidates}[name]

    def quantize_config(self, model: nn.Module | None = None) -> QuantizeConfig:
        """QuantizeConfig with one override per planned layer (None = float); with ``model``, first
        check that the plan fits it (same layers and shapes)."""
        if model is not None:
            self.check_model(model)
        cfgs = {c.name: c.config for c in self.candidates}
        return QuantizeConfig(
            default=None,
            exclude=tuple(self.exclude),
            overrides={n: cfgs[c] for n, c in self.layers.items()},
            awq_prescale=self.awq_prescale,
        )

    def check_model(self, model: nn.Module) -> None:
        mods = dict(model.named_modules())
        missing = [n for n in self.layers if not isinstance(mods.get(n), nn.Linear)]
        if missing:
            raise ValueError(
                f"plan for model {self.model!r} does not fit this model: {len(missing)} planned layers are "
                f"not nn.Linear layers of it (e.g. {missing[:3]})"
            )
        for n in self.layers:
            m = mods[n]
            want = self.sensitivity.shapes.get(n)
            if want is not None and [m.out_features, m.in_features] != list(want):
                raise ValueError(
                    f"plan for model {self.model!r} does not fit this model: layer {n!r} is "
                    f"[{m.out_features}, {m.in_features}], the plan was made for {want}"
                )

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.layers.values():
            out[c] = out.get(c, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def nbytes(self) -> int:
        return sum(self.sensitivity.nbytes[n][c] for n, c in self.layers.items())

    def float_nbytes(self) -> int:
        return sum(self.sensitivity.nbytes[n]["float"] for n in self.layers)

    def summary(self) -> str:
        b, fb = self.nbytes(), self.float_nbytes()
        lines = [
            f"plan for {self.model}: budget {self.budget * 100:.2f} % ({self.metric or 'metric'})",
            "layers per precision: " + ", ".join(f"{c} {k}" for c, k in self.counts().items()),
            f"planned weights: {fb / 2**20:.1f} MiB float -> {b / 2**20:.1f} MiB "
            f"({b / max(fb, 1) * 100:.1f} %)",
            f"proxy-predicted degradation: {self.predicted * 100:+.3f} %",
        ]
        for rt, v in self.verified.items():
            vals = ", ".join(f"{k} {x:.4f}" for k, x in v["values"].items())
            lines.append(f"verified ({rt}): degradation {v['degradation'] * 100:+.3f} % ({vals})")
        if self.within_budget is not None:
            lines.append("within budget" if self.within_budget else "NOT within budget")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "model": self.model,
            "budget": self.budget,
            "metric": self.metric,
            "float_value": self.float_value,
            "candidates": {c.name: _layer_to_dict(c.config) for c in self.candidates},
            "exclude": list(self.exclude),
            "layers": dict(self.layers),
            "counts": self.counts(),
            "bytes": {"planned": self.nbytes(), "float": self.float_nbytes()},
            "predicted_degradation": self.predicted,
            "verified": self.verified,
            "within_budget": self.within_budget,
            "history": self.history,
            "info": self.info,
            "sensitivity": self.sensitivity.to_dict(),
            "awq_prescale": _layer_to_dict(self.awq_prescale),
            "config": self.quantize_config().to_dict(),
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Plan:
        if not isinstance(d, Mapping) or d.get("format") != PLAN_FORMAT:
            raise ValueError(f"not a pyquant plan (expected format {PLAN_FORMAT!r})")
        cands = [Candidate(k, _layer_from_dict(v)) for k, v in d["candidates"].items()]
        names = {c.name for c in cands}
        bad = {n: c for n, c in d["layers"].items() if c not in names}
        if bad:
            raise ValueError(f"plan layers use unknown candidates: {dict(list(bad.items())[:3])}")
        return cls(
            model=d["model"],
            budget=float(d["budget"]),
            candidates=cands,
            layers=dict(d["layers"]),
            sensitivity=Sensitivity.from_dict(d["sensitivity"]),
            exclude=list(d.get("exclude", [])),
            metric=d.get("metric", ""),
            float_value=d.get("float_value"),
            verified=dict(d.get("verified", {})),
            history=list(d.get("history", [])),
            predicted=float(d.get("predicted_degradation", 0.0)),
            within_budget=d.get("within_budget"),
            info=dict(d.get("info", {})),
            awq_prescale=_layer_from_dict(d.get("awq_prescale")),
        )

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"plan file {p} does not exist")
        try:
            d = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}: not a pyquant plan (invalid JSON: {e})") from None
        try:
            return cls.from_dict(d)
        except (KeyError, TypeError) as e:
            raise ValueError(f"{p}: incomplete pyquant plan (missing {e})") from None


def make_plan(
    sens: Sensitivity,
    budget: float,
    verify: VerifyFn | None,
    *,
    verify_final: VerifyFn | None = None,
    model_name: str = "",
    metric: str = "",
    exclude: Sequence[str] = (),
    max_evals: int = 6,
    max_final_evals: int = 3,
    progress: bool = True,
) -> Plan:
    """Choose a candidate per layer maximising compression with the verified degradation <= budget.

    verify(qcfg) scores the whole model quantized with qcfg (cheap runtime, e.g. torch eager); at most
    ``max_evals`` calls drive the search along the greedy path. verify_final(qcfg) (e.g. the exported
    model in ONNX Runtime) checks the result and, if it is over budget, the plan backs off along the
    path, at most ``max_final_evals`` calls in all. Without ``verify`` the proxy prediction alone decides
    (``within_budget`` stays None). The all-fallback assignment (every layer at its highest-precision
    candidate, normally float) is assumed to be within budget and is never measured.
    """
    budget = parse_budget(budget)
    names = [c.name for c in sens.candidates]
    fallback = {}
    for layer, costs in sens.proxy.items():
        ok = [c for c in names if costs.get(c) is not None]
        if not ok:
            raise ValueError(f"layer {layer!r}: no candidate applies ({sens.skipped.get(layer)})")
        fallback[layer] = max(ok, key=lambda c: (sens.nbytes[layer][c], -names.index(c)))
    steps = _greedy_path(sens, fallback)
    base_cost = sum(sens.proxy[n][c] or 0.0 for n, c in fallback.items())
    cum = [base_cost]
    for s in steps:
        cum.append(cum[-1] + s.cost)
    pred = [predicted_degradation(sens.proxy_kind, c) for c in cum]

    def qcfg(k: int) -> QuantizeConfig:
        cfgs = {c.name: c.config for c in sens.candidates}
        return QuantizeConfig(
            default=None,
            exclude=tuple(exclude),
            overrides={n: cfgs[c] for n, c in _assignment(fallback, steps, k).items()},
        )

    def last_within(limit: float, scale: float, lo: int, hi: int) -> int:
        """Largest k in [lo, hi] whose scaled prediction is within limit (lo if none)."""
        best = lo
        for k in range(lo, hi + 1):
            if pred[k] * scale <= limit:
                best = k
        return best

    history: list[dict[str, Any]] = []
    results: dict[int, Verification] = {}
    n = len(steps)

    def run(fn: VerifyFn, k: int, stage: str) -> Verification:
        t = time.perf_counter()
        v = fn(qcfg(k))
        history.append(
            {
                "stage": stage,
                "steps": k,
                "of": n,
                "bytes": _bytes_at(sens, fallback, steps, k),
                "predicted": pred[k],
                "degradation": v.degradation,
                "values": v.values,
                "runtime": v.runtime,
                "seconds": round(time.perf_counter() - t, 1),
            }
        )
        log.info(
            "pyquant planner: %s %d/%d steps: predicted %+.3f %%, measured %+.3f %% (%s)",
            stage,
            k,
            n,
            pred[k] * 100,
            v.degradation * 100,
            v.runtime,
        )
        if progress:
            print(
                f"  [{stage}] {k}/{n} steps, {_bytes_at(sens, fallback, steps, k) / 2**20:.1f} MiB: "
                f"predicted {pred[k] * 100:+.3f} %, measured {v.degradation * 100:+.3f} % ({v.runtime})",
                flush=True,
            )
        return v

    # Search along the path with the cheap verifier: lo = largest k known within budget (0 = fallback,
    # assumed), hi = smallest k known over budget (n + 1 = none yet). The next point is the proxy's
    # prediction rescaled by the last measurement, kept inside the middle half of a closed bracket so
    # that each evaluation at least quarters it.
    lo, hi = 0, n + 1
    k = last_within(budget, 1.0, 0, n)
    if verify is not None:
        k = max(k, min(1, n))
        evals = 0
        while evals < max_evals and hi - lo > 1:
            if not lo < k < hi or k in results:
                k = (lo + hi) // 2
            v = run(verify, k, "search")
            results[k] = v
            evals += 1
            if v.degradation <= budget:
                lo = k
            else:
                hi = k
            if hi - lo <= 1:
                break
            scale = v.degradation / pred[k] if pred[k] > 0 and v.degradation > 0 else 1.0
            k = last_within(budget, scale, lo + 1, min(hi - 1, n))
            if hi <= n:
                q = (hi - lo) // 4
                k = min(max(k, lo + max(q, 1)), hi - max(q, 1))
        chosen = lo
    else:
        chosen = k

    finals: dict[int, Verification] = {}
    if verify_final is not None and chosen > 0:
        for i in range(max_final_evals):
            v = finals[chosen] = run(verify_final, chosen, "final")
            if v.degradation <= budget or i == max_final_evals - 1:
                break
            # Back off: undo the last (most sensitive per byte) steps of the path. The final runtime
            # measured `scale` times what the cheap verifier (or the proxy) said here, so aim the cheap
            # estimate at budget / scale, 5 % lower still: one step's effect is noisy at this level.
            cheap = _interpolate(results, pred, chosen)
            scale = v.degradation / cheap if cheap > 0 else 2.0
            target = 0.95 * budget / max(scale, 1.0)
            nxt = 0
            for kk in range(chosen - 1, 0, -1):
                if _interpolate(results, pred, kk) <= target:
                    nxt = kk
                    break
            chosen = nxt
            if chosen == 0:
                break
    verified = {r[chosen].runtime: _vdict(r[chosen]) for r in (results, finals) if chosen in r}
    if chosen == 0:
        within: bool | None = True if verify is not None or verify_final is not None else None
    elif verified:
        within = all(v["degradation"] <= budget for v in verified.values())
    else:
        within = None
    a = _assignment(fallback, steps, chosen)
    return Plan(
        model=model_name,
        budget=budget,
        candidates=list(sens.candidates),
        layers=a,
        sensitivity=sens,
        exclude=list(exclude),
        metric=metric,
        verified=verified,
        history=history,
        predicted=pred[chosen],
        within_budget=within,
        info={"steps": chosen, "path_steps": n},
    )


def _interpolate(results: Mapping[int, Verification], pred: Sequence[float], k: int) -> float:
    """Cheap-runtime degradation at path point k: measured, else linear between the nearest measured
    points (k = 0, the fallback, counts as 0), else the proxy prediction rescaled at the nearest one."""
    if k in results:
        return results[k].degradation
    pts = {0: 0.0, **{kk: v.degradation for kk, v in results.items()}}
    below = max(kk for kk in pts if kk < k)
    above = [kk for kk in pts if kk > k]
    if above:
        hi = min(above)
        t = (k - below) / (hi - below)
        return pts[below] + t * (pts[hi] - pts[below])
    if below > 0 and pred[below] > 0:
        return pred[k] * pts[below] / pred[below]
    return pred[k]


def _vdict(v: Verification) -> dict[str, Any]:
    return {"degradation": v.degradation, "values": v.values, "runtime": v.runtime}


def _bytes_at(sens: Sensitivity, fallback: dict[str, str], steps: Sequence[_Step], k: int) -> int:
    return sum(sens.nbytes[n][c] for n, c in _assignment(fallback, steps, k).items())
