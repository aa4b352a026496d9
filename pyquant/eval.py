"""End-to-end evaluation: float PyTorch model vs its quantized ONNX export running in ONNX Runtime.

    results = pyquant.eval.evaluate("minilm", schemes=("int4", "fp8"))
    print(pyquant.eval.format_table(results))

For each scheme: copy the float model, quantize it (recipe's layers kept in float, calibration data
for static FP8), export it with pyquant.export, open it with pyquant.ort.make_session and score it
with the recipe's metric. The float reference is the float32 PyTorch model (``runtime="torch"``
scores the quantized PyTorch modules instead of ORT, for machines without the op library).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import platform
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from pyquant.config import Int4Config, QuantizeConfig, _layer_to_dict
from pyquant.export import export
from pyquant.models import metrics
from pyquant.models.recipes import ModelRecipe, get_recipe
from pyquant.quantize import quantize

__all__ = ["EvalResult", "evaluate", "format_table", "write_results"]

log = logging.getLogger("pyquant")


@dataclass
class EvalResult:
    model: str
    scheme: str
    config: str  # human-readable layer config
    metric: str
    float_value: float
    quant_value: float
    delta_pct: float  # relative change, (quant / float - 1) * 100
    runtime: str  # what ran the quantized model: "onnxruntime-cpu" or "torch"
    file_bytes: int | None = None  # exported .onnx (+ external data)
    float_file_bytes: int | None = None
    latency_ms: float | None = None  # quantized model, one batch (see speed_batch)
    float_latency_ms: float | None = None  # float export in the same runtime
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    weight_bytes: int | None = None  # parameters + buffers of the quantized PyTorch model
    float_weight_bytes: int | None = None
    precisions: dict[str, int] = field(default_factory=dict)  # nn.Linear layers per precision


def _example_inputs() -> dict[str, torch.Tensor]:
    # batch and sequence >= 2 so that torch.export keeps both dims dynamic
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (2, 16), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


class _Task:
    """Data and scoring for one recipe metric; scores a Forward, returns (main value, extras)."""

    def __init__(self, recipe: ModelRecipe, tokenizer: Any, quick: bool, progress: bool) -> None:
        from pyquant.models import data

        self.recipe, self.tok, self.progress = recipe, tokenizer, progress
        s = dict(recipe.eval_settings)
        if recipe.metric == "perplexity":
            n = 2 if quick else s["n_seqs"]
            self.ids = data.wiki_token_sequences(tokenizer, n, s["seq_len"])
            n_cal = min(4, s["calib_seqs"]) if quick else s["calib_seqs"]
            self.calib = data.wiki_token_sequences(tokenizer, n_cal, s["seq_len"], offset_seqs=s["n_seqs"])
            self.name = f"wiki perplexity ({n}x{s['seq_len']} tokens)"
        else:
            mpc = 20 if quick else s.get("max_per_class")
            self.bbc = data.bbc_news(mpc)
            self.texts = self.bbc.train_texts + self.bbc.test_texts
            self.ntrain = len(self.bbc.train_texts)
            calib = self.bbc.train_texts[: s["calib_texts"]]
            enc = tokenizer(
                calib, truncation=True, max_length=s["max_len"], padding=True, return_tensors="pt"
            )
            self.calib_batches = [
                {
                    "input_ids": enc["input_ids"][i : i + 16],
                    "attention_mask": enc["attention_mask"][i : i + 16],
                }
                for i in range(0, len(calib), 16)
            ]
            self.name = f"BBC 5-class accuracy ({len(self.bbc.test_texts)} test docs)"
        self.float_emb: np.ndarray | None = None

    def calibration_data(self) -> list[dict[str, torch.Tensor]]:
        if self.recipe.metric == "perplexity":
            b = self.recipe.eval_settings["batch_size"]
            return [
                {
                    "input_ids": torch.from_numpy(self.calib[i : i + b]),
                    "attention_mask": torch.ones(self.calib[i : i + b].shape, dtype=torch.int64),
                }
                for i in range(0, len(self.calib), b)
            ]
        return self.calib_batches

    def score(self, fwd: metrics.Forward, label: str) -> tuple[float, dict[str, Any]]:
        s = self.recipe.eval_settings
        if self.recipe.metric == "perplexity":
            return metrics.perplexity(fwd, self.ids, s["batch_size"], self.progress, label), {}
        emb = metrics.embed_texts(
            fwd, self.tok, self.texts, s["max_len"], s["batch_size"], self.progress, label
        )
        acc = metrics.classification_accuracy(
            emb[: self.ntrain], self.bbc.train_labels, emb[self.ntrain :], self.bbc.test_labels
        )
        extra: dict[str, Any] = {}
        if self.float_emb is None:
            self.float_emb = emb
        else:
            extra["cosine_vs_float"] = metrics.mean_cosine(emb, self.float_emb)
        return acc, extra

    def speed_batch(self) -> tuple[np.ndarray, np.ndarray]:
        g = np.random.default_rng(0)
        shape = (1, 256) if self.recipe.metric == "perplexity" else (8, 128)
        ids = g.integers(5, 1000, size=shape, dtype=np.int64)
        return ids, np.ones_like(ids)


def evaluate(
    model: str = "minilm",
    schemes: Sequence[str | tuple[str, Any]] = ("int4", "fp8"),
    *,
    runtime: Literal["ort", "torch"] = "ort",
    providers: Sequence[Any] = ("cpu",),
    out_dir: str | Path | None = None,
    speed: bool = True,
    quick: bool = False,
    progress: bool = True,
    command: str = "",
    threads: int | None = None,
    int4_gpu_layout: str | None = None,
) -> list[EvalResult]:
    """Score the float model and each quantized scheme on the recipe's metric (see module doc).

    schemes: recipe scheme names, or (label, QuantizeConfig | pyquant.planner.Plan) pairs (a plan is
    checked against the model first). threads: ONNX Runtime intra-op threads (default: ORT's).
    int4_gpu_layout: the quantized sessions' MatMulInt4 weight layout on a Hopper GPU
    (pyquant.ort.make_session; None: as the environment says).
    """
    torch.manual_seed(0)
    recipe = get_recipe(model)
    t0 = time.perf_counter()
    float_model, tok = recipe.load()
    task = _Task(recipe, tok, quick, progress)
    log.info("pyquant eval: %s, metric %s", recipe.title, task.name)
    float_value, _ = task.score(metrics.torch_forward(recipe.wrap(float_model)), "float (torch)")
    tmp = None
    if out_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="pyquant-eval-")
        out_dir = tmp.name
    out_dir = Path(out_dir)
    short = Path(recipe.name).name
    float_file = float_latency = None
    speed_ids, speed_mask = task.speed_batch()
    if runtime == "ort":
        from pyquant.ort import make_session
    try:
        if runtime == "ort" and speed:
            rep = export(recipe.wrap(float_model), _example_inputs(), out_dir / f"{short}-float.onnx")
            float_file = rep.file_bytes
            fs = make_session(rep.path, providers=providers, options=_ort_options(threads))
            float_latency = metrics.latency_ms(metrics.ort_forward(fs), speed_ids, speed_mask)
            del fs
        results = []
        float_wbytes = _model_bytes(float_model)
        for item in schemes:
            ts = time.perf_counter()
            scheme, qcfg, describe, plan_extra = _scheme_config(recipe, float_model, item)
            qmodel = quantize(
                copy.deepcopy(float_model), qcfg, calibration_data=task.calibration_data(), progress=progress
            )
            wrapped = recipe.wrap(qmodel)
            file_bytes = latency = None
            if runtime == "ort":
                rep = export(wrapped, _example_inputs(), out_dir / f"{short}-{_file_label(scheme)}.onnx")
                file_bytes = rep.file_bytes
                sess = make_session(
                    rep.path,
                    providers=providers,
                    options=_ort_options(threads),
                    int4_gpu_layout=int4_gpu_layout,
                )
                fwd = metrics.ort_forward(sess)
                rt = "onnxruntime-" + "-".join(str(p if isinstance(p, str) else p[0]) for p in providers)
            else:
                fwd = metrics.torch_forward(wrapped)
                rt = "torch"
            value, extra = task.score(fwd, f"{scheme} ({rt})")
            if speed:
                latency = metrics.latency_ms(fwd, speed_ids, speed_mask)
            summary = qmodel.pyquant_summary
            extra.update(
                **plan_extra,
                quantized_layers=len(summary.quantized),
                float_layers=sorted(summary.skipped),
                keep_float=list(recipe.keep_float),
            )
            results.append(
                EvalResult(
                    model=recipe.name,
                    scheme=scheme,
                    config=describe,
                    metric=task.name,
                    float_value=float_value,
                    quant_value=value,
                    delta_pct=100.0 * (value / float_value - 1.0),
                    runtime=rt,
                    file_bytes=file_bytes,
                    float_file_bytes=float_file,
                    latency_ms=latency,
                    float_latency_ms=float_latency,
                    seconds=time.perf_counter() - ts,
                    extra={**extra, "speed_batch": list(speed_ids.shape), "command": command},
                    weight_bytes=_model_bytes(qmodel),
                    float_weight_bytes=float_wbytes,
                    precisions=layer_precisions(qmodel),
                )
            )
            del qmodel, wrapped, fwd
    finally:
        if tmp is not None:
            tmp.cleanup()
    log.info("pyquant eval: %.0f s", time.perf_counter() - t0)
    return results


def _scheme_config(
    recipe: ModelRecipe, float_model: torch.nn.Module, item: str | tuple[str, Any]
) -> tuple[str, QuantizeConfig, str, dict[str, Any]]:
    """-> (label, config, description, extras) of one evaluate() scheme item."""
    from pyquant.planner import Plan

    if isinstance(item, str):
        qcfg = recipe.quantize_config(item)
        if qcfg is None:
            raise ValueError("'float' is the reference; name quantized schemes only")
        desc = qcfg.default.describe() + ("" if qcfg.smoothing is None else f" smoothing {qcfg.smoothing}")
        if tuple(qcfg.include) != ("*",):
            desc += " on " + ", ".join(qcfg.include)
        return item, qcfg, desc, {}
    label, cfg = item
    if isinstance(cfg, Plan):
        if cfg.model and Path(cfg.model).name != Path(recipe.name).name:
            raise ValueError(f"plan {label!r} was made for model {cfg.model!r}, not {recipe.name!r}")
        counts = ", ".join(f"{c} {k}" for c, k in cfg.counts().items())
        desc = f"plan, budget {cfg.budget * 100:g} %: {counts}"
        return label, cfg.quantize_config(float_model), desc, {"budget": cfg.budget}
    if isinstance(cfg, QuantizeConfig):
        return label, cfg, "custom config", {}
    raise ValueError(f"scheme {label!r}: expected a QuantizeConfig or a Plan, got {type(cfg).__name__}")


def _file_label(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)


def _model_bytes(model: torch.nn.Module) -> int:
    """Parameters + buffers (tied weights counted once)."""
    seen: set[int] = set()
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def layer_precisions(model: torch.nn.Module) -> dict[str, int]:
    """Number of linear layers per precision ("float" or the config's describe())."""
    from pyquant.modules import QuantizedLinear

    out: dict[str, int] = {}
    for m in model.modules():
        if isinstance(m, QuantizedLinear):
            key = m.config.describe()
        elif isinstance(m, torch.nn.Linear):
            key = "float"
        else:
            continue
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _ort_options(threads: int | None) -> Any:
    if not threads:
        return None
    import onnxruntime

    so = onnxruntime.SessionOptions()
    # On a shared, busy machine ORT's spinning worker threads cost more than they gain.
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return so


def _mib(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**20:.1f}"


def format_table(results: Sequence[EvalResult]) -> str:
    """Markdown table of results (one row per scheme)."""
    head = (
        "| model | scheme | metric | float | quantized | delta % | extra | weights MiB (float) "
        "| file MiB (float) | latency ms (float) | linear layers | runtime |"
    )
    lines = [head, "|" + "---|" * 12]
    for r in results:
        extra = ", ".join(f"{k}={v:.4f}" for k, v in r.extra.items() if isinstance(v, float)) or "-"
        lat = "-" if r.latency_ms is None else f"{r.latency_ms:.1f}"
        if r.float_latency_ms is not None:
            lat += f" ({r.float_latency_ms:.1f})"
        layers = "; ".join(f"{k}: {v}" for k, v in r.precisions.items()) or "-"
        lines.append(
            f"| {Path(r.model).name} | {r.scheme}: {r.config} | {r.metric} | {r.float_value:.4f} | "
            f"{r.quant_value:.4f} | {r.delta_pct:+.2f} | {extra} | "
            f"{_mib(r.weight_bytes)} ({_mib(r.float_weight_bytes)}) | "
            f"{_mib(r.file_bytes)} ({_mib(r.float_file_bytes)}) | {lat} | {layers} | {r.runtime} |"
        )
    return "\n".join(lines)


def write_results(
    results: Sequence[EvalResult], base: str | Path, title: str = "", notes: str = "", plot: bool = True
) -> Path | None:
    """Write ``base``.json (machine-readable) and ``base``.md (table + notes) and, with matplotlib
    installed, ``base``.png (metric against model size). Returns the plot's path or None."""
    base = Path(base)
    base.parent.mkdir(parents=True, exist_ok=True)
    import onnxruntime
    import transformers

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "transformers": transformers.__version__,
        "machine": platform.machine(),
        "cpu_count": _cpus(),
        "git_commit": git_commit(),
    }
    base.with_suffix(".json").write_text(
        json.dumps({"environment": env, "results": [asdict(r) for r in results]}, indent=2) + "\n"
    )
    png = plot_results(results, base.with_suffix(".png"), title) if plot and results else None
    md = [
        f"# {title or 'pyquant accuracy'}",
        "",
        format_table(results),
        "",
        "Weights: parameters and buffers of the PyTorch model (float32 reference; quantized layers "
        "packed). Linear layers: count per precision (float includes layers a recipe keeps in float, "
        "e.g. SmolLM2's lm_head, tied to the embedding).",
        "",
        "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()),
        "",
    ]
    if png is not None:
        md += [f"![{base.name}]({png.name})", ""]
    if notes:
        md += [notes, ""]
    base.with_suffix(".md").write_text("\n".join(md))
    return png


def plot_results(results: Sequence[EvalResult], path: str | Path, title: str = "") -> Path | None:
    """Metric against model size (weights MiB), float model included; None (with a message) without
    matplotlib, an optional dependency."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: skipping the plot (pip install matplotlib)")
        return None
    rows = [r for r in results if r.weight_bytes is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    r0 = rows[0]
    worse_up = "perplexity" in r0.metric
    # delta % against float on a symlog axis: the 1 % region stays readable next to +75 % outliers
    ax.set_yscale("symlog", linthresh=1.0)
    fx = r0.float_weight_bytes / 2**20
    ax.scatter([fx], [0.0], marker="*", s=160, c="k", zorder=3)
    ax.annotate(
        f"float ({r0.float_value:.4f})", (fx, 0.0), textcoords="offset points", xytext=(-20, 8), fontsize=8
    )
    for r in rows:
        plan = "budget" in r.extra
        x = r.weight_bytes / 2**20
        ax.scatter(
            [x], [r.delta_pct], marker="D" if plan else "o", c="tab:red" if plan else "tab:blue", zorder=3
        )
        ax.annotate(
            f"{_short(r.scheme)} ({r.delta_pct:+.2f} %)"
            + (f", cos {r.extra['cosine_vs_float']:.4f}" if "cosine_vs_float" in r.extra else ""),
            (x, r.delta_pct),
            textcoords="offset points",
            xytext=(6, -10 - 11 * sum("budget" in q.extra for q in rows[: rows.index(r)]) if plan else 4),
            fontsize=8,
        )
    for b in sorted({r.extra["budget"] for r in rows if "budget" in r.extra}):
        y = 100 * b if worse_up else -100 * b
        ax.axhline(y, ls="--", lw=0.8, c="tab:red")
        ax.annotate(
            f"budget {b * 100:g} %",
            (ax.get_xlim()[0], y),
            textcoords="offset points",
            xytext=(4, 3),
            fontsize=8,
            color="tab:red",
        )
    ax.axhline(0.0, lw=0.5, c="k")
    ax.set_xlabel("model weights, MiB (parameters + buffers)")
    ax.set_ylabel(
        f"{r0.metric}: change vs float, % ({'lower' if worse_up else 'higher'} is better)", fontsize=8
    )
    ax.set_title(title or Path(r0.model).name, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def _short(label: str) -> str:
    # "plan:2026-11-22-cpu-plan-smollm2-fp8" -> "plan smollm2-fp8"
    return "plan " + label.rsplit("plan-", 1)[-1] if label.startswith("plan:") else label


def replot(json_path: str | Path, title: str = "") -> Path | None:
    """Redraw ``<base>.png`` from a results JSON written by write_results."""
    d = json.loads(Path(json_path).read_text())
    return plot_results([EvalResult(**r) for r in d["results"]], Path(json_path).with_suffix(".png"), title)


def git_commit() -> str | None:
    import subprocess

    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)


# --- the planner on a recipe model ---------------------------------------------------------------------


def _recipe_layer_config(recipe: ModelRecipe, scheme: str) -> Any:
    """A planner candidate from a recipe scheme name: the recipe's layer config for it (so tuned
    defaults and every scheme suffix the recipe knows work). Model-wide parts cannot be per layer."""
    if "-sq" in scheme:
        raise ValueError("smoothing (-sq...) is model-wide; it cannot be a per-layer candidate")
    qcfg = recipe.quantize_config(scheme)
    if qcfg is None:
        return None
    if tuple(qcfg.include) != ("*",):
        raise ValueError("a layer-subset suffix (-mlp) is not a per-layer precision")
    return qcfg.default


def causal_proxy_batches(calib: Any, seq: int, n_tokens: int) -> list[torch.Tensor]:
    """The planner's causal-LM proxy batches: the first ``n_tokens`` of the calibration token ids
    (array [rows, length]) as sequences of ``seq`` tokens, one sequence per batch. One per batch
    because calibrated candidates (GPTQ, static FP8 scales) are measured by cross-fitting over
    batches (pyquant.sensitivity), which needs two at least: with two sequences in one batch they
    were measured on the tokens they had been fitted to."""
    ids = torch.as_tensor(calib)
    chunks = ids[:, : ids.shape[1] // seq * seq].reshape(-1, seq)[: max(1, n_tokens // seq)]
    if len(chunks) == 0:
        raise ValueError(f"the calibration text has fewer than {seq} tokens per row")
    return [chunks[i : i + 1] for i in range(len(chunks))]


def causal_proxy_and_fit_batches(
    calib: Any, seq: int, n_tokens: int, batch_size: int
) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """(proxy batches, fit batches or None) for the planner on a causal LM: the proxy is measured on
    the last calibration rows (as many as ``n_tokens`` needs, see causal_proxy_batches) and
    calibrated candidates (GPTQ, static FP8) are fitted on the other rows, in batches of
    ``batch_size`` rows: out of sample, and GPTQ sees nearly the data of the final quantization (a
    few hundred tokens overfit its Hessians). None (two-fold cross-fitting on the proxy batches)
    when there is no row left to fit on."""
    ids = torch.as_tensor(calib)
    n_proxy = min(len(ids), max(1, -(-n_tokens // ids.shape[1])))
    proxy = causal_proxy_batches(ids[len(ids) - n_proxy :], seq, n_tokens)
    n_fit = len(ids) - n_proxy
    fit = [ids[i : min(i + batch_size, n_fit)] for i in range(0, n_fit, batch_size)] if n_fit else None
    return proxy, fit


def _awq_candidates(cands: list[Any]) -> tuple[list[Any], Int4Config | None]:
    """AWQ candidates of a plan (e.g. int4-b64-asym-awq-gptq-act): AWQ cannot be measured per layer
    (its scales fold into the norm before a whole group), so the plan prescales every planned layer's
    group once (``QuantizeConfig.awq_prescale``) and the candidate keeps its final quantizer: GPTQ for
    "awq-gptq", the clipping search for "awq". One AWQ format (block size, symmetry) per plan."""
    from pyquant.awq import AWQ_ALGORITHMS
    from pyquant.planner import Candidate

    out, prescale = [], None
    for c in cands:
        cfg = c.config
        if isinstance(cfg, Int4Config) and cfg.algorithm in AWQ_ALGORITHMS:
            fmt = Int4Config(cfg.block_size, cfg.symmetric, "awq")
            if prescale is not None and prescale != fmt:
                raise ValueError(
                    f"candidate {c.name!r}: a plan's AWQ candidates share one INT4 format; "
                    f"{fmt.describe()} differs from {prescale.describe()}"
                )
            prescale = fmt
            cfg = dataclasses.replace(cfg, algorithm="gptq" if cfg.algorithm == "awq-gptq" else "mse")
        out.append(Candidate(c.name, cfg))
    return out, prescale


def plan_model(
    model: str = "smollm2",
    budget: float | str = 0.01,
    candidates: Sequence[str] = ("float", "fp8", "int4-b128"),
    *,
    proxy_tokens: int | None = None,
    verify_ort: bool = True,
    max_evals: int = 6,
    max_ort_evals: int = 3,
    providers: Sequence[Any] = ("cpu",),
    threads: int | None = None,
    sensitivity_cache: str | Path | None = None,
    quick: bool = False,
    progress: bool = True,
    command: str = "",
) -> Any:
    """Sensitivity + plan + verification for a recipe model (``pyquant plan``); returns the Plan.

    Proxy: next-token KL on the recipe's last calibration sequence (causal LM; ``proxy_tokens``
    tokens in sequences of 128, default 256; calibrated candidates fitted on the other sequences)
    or 1 - cosine of the mean-pooled embeddings of the calibration texts (encoder). The budget
    applies to the recipe metric: relative perplexity increase (causal LM), or for encoders the
    larger of the relative accuracy drop and 1 - mean cosine of the embeddings against float
    (accuracy on 120 documents moves in steps of 0.8 %, the cosine is the smooth, stricter part).
    Verified in torch eager during the search, then in ONNX Runtime
    (the exported model) unless ``verify_ort`` is False.
    """
    import pyquant
    from pyquant.planner import Verification, make_plan, parse_budget, resolve_candidates
    from pyquant.sensitivity import Sensitivity, measure_sensitivity

    budget = parse_budget(budget)
    commit = git_commit()  # the code that runs, before other commits land during a long plan
    torch.manual_seed(0)
    t0 = time.perf_counter()
    recipe = get_recipe(model)
    cands = resolve_candidates(list(candidates), lambda s: _recipe_layer_config(recipe, s))
    cands, awq_prescale = _awq_candidates(cands)
    float_model, tok = recipe.load()
    task = _Task(recipe, tok, quick, progress)
    causal = recipe.task == "causal-lm"
    import fnmatch

    layers = [
        n
        for n, m in float_model.named_modules()
        if isinstance(m, torch.nn.Linear)
        and n
        and not any(fnmatch.fnmatchcase(n, p) for p in recipe.keep_float)
    ]

    fit_batches: list[Any] | None = None
    if causal:
        seq = 128 if not quick else 64
        n_tok = proxy_tokens or (256 if not quick else 128)
        batches, fit_batches = causal_proxy_and_fit_batches(
            task.calib, seq, n_tok, recipe.eval_settings["batch_size"]
        )

        def output_fn(m: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
            return m(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits

        proxy = "kl"
    else:
        batches = task.calibration_data()

        def output_fn(m: torch.nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
            h = m(**b).last_hidden_state
            mask = b["attention_mask"][..., None].to(h.dtype)
            return (h * mask).sum(1) / mask.sum(1).clamp_min(1e-9)

        proxy = "cosine"

    if awq_prescale is not None:
        # Sensitivities, fits and verification all on the AWQ-scaled float model (the same function);
        # the plan carries the prescale, so applying it to the float model redoes these scales.
        from pyquant.awq import awq_model
        from pyquant.quantize import awq_prescale_layers

        # The scope of the plan's own QuantizeConfig (Plan.quantize_config: exclude = keep_float), so
        # the scales measured here are the ones applying the plan computes.
        scope = QuantizeConfig(default=None, exclude=recipe.keep_float, awq_prescale=awq_prescale)
        awq_model(
            float_model, task.calibration_data(), awq_prescale_layers(float_model, scope), progress=progress
        )

    known = None
    cache = Path(sensitivity_cache) if sensitivity_cache else None
    if cache is not None and cache.is_file():
        d = json.loads(cache.read_text())
        known = Sensitivity.from_dict(d.get("sensitivity", d))
        if sorted(known.proxy) != sorted(layers):
            log.warning("pyquant plan: %s is for other layers; not reused", cache)
            known = None
        elif d.get("awq_prescale") != _layer_to_dict(awq_prescale):
            log.warning("pyquant plan: %s was measured with another AWQ prescale; not reused", cache)
            known = None
    sens = measure_sensitivity(
        float_model,
        cands,
        batches,
        output_fn,
        proxy=proxy,
        layers=layers,
        known=known,
        fit_batches=fit_batches,
        progress=progress,
    )
    if cache is not None:
        entry = {
            "model": recipe.name,
            "awq_prescale": _layer_to_dict(awq_prescale),
            "sensitivity": sens.to_dict(),
        }
        cache.write_text(json.dumps(entry, indent=1) + "\n")

    float_value, _ = task.score(metrics.torch_forward(recipe.wrap(float_model)), "float (torch)")

    def degradation(value: float, extra: dict[str, Any]) -> tuple[float, dict[str, float]]:
        if causal:
            return value / float_value - 1.0, {"perplexity": value}
        cos = float(extra.get("cosine_vs_float", 1.0))
        return max(1.0 - value / float_value, 1.0 - cos), {"accuracy": value, "cosine_vs_float": cos}

    def quantized(qcfg: QuantizeConfig) -> torch.nn.Module:
        qcfg = dataclasses.replace(qcfg, awq_prescale=None)  # float_model is already scaled
        return quantize(copy.deepcopy(float_model), qcfg, calibration_data=task.calibration_data())

    def verify_torch(qcfg: QuantizeConfig) -> Verification:
        wrapped = recipe.wrap(quantized(qcfg))
        value, extra = task.score(metrics.torch_forward(wrapped), "plan (torch)")
        d, vals = degradation(value, extra)
        return Verification(d, vals, "torch")

    tmp = tempfile.TemporaryDirectory(prefix="pyquant-plan-")

    def verify_onnx(qcfg: QuantizeConfig) -> Verification:
        from pyquant.ort import make_session

        rep = export(recipe.wrap(quantized(qcfg)), _example_inputs(), Path(tmp.name) / "plan.onnx")
        sess = make_session(rep.path, providers=providers, options=_ort_options(threads))
        value, extra = task.score(metrics.ort_forward(sess), "plan (onnxruntime)")
        del sess
        d, vals = degradation(value, extra)
        vals["file_mib"] = rep.file_bytes / 2**20
        return Verification(d, vals, "onnxruntime-" + "-".join(str(p) for p in providers))

    try:
        plan = make_plan(
            sens,
            budget,
            verify_torch,
            verify_final=verify_onnx if verify_ort else None,
            model_name=recipe.name,
            metric=task.name + ("" if causal else " and 1 - cosine vs float"),
            exclude=recipe.keep_float,
            max_evals=max_evals,
            max_final_evals=max_ort_evals,
            progress=progress,
        )
    finally:
        tmp.cleanup()
    plan.float_value = float_value
    plan.awq_prescale = awq_prescale
    plan.info.update(
        pyquant_version=pyquant.__version__,
        git_commit=commit,
        command=command,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        proxy=proxy,
        proxy_tokens=sens.tokens,
        sensitivity_seconds=round(sens.seconds, 1),
        seconds=round(time.perf_counter() - t0, 1),
        torch_threads=torch.get_num_threads(),
        quick=quick,
    )
    return plan
