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
            self.calib = data.wiki_token_sequences(
                tokenizer, s["calib_seqs"], s["seq_len"], offset_seqs=s["n_seqs"]
            )
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
    schemes: Sequence[str] = ("int4", "fp8"),
    *,
    runtime: Literal["ort", "torch"] = "ort",
    providers: Sequence[Any] = ("cpu",),
    out_dir: str | Path | None = None,
    speed: bool = True,
    quick: bool = False,
    progress: bool = True,
    command: str = "",
) -> list[EvalResult]:
    """Score the float model and each quantized scheme on the recipe's metric (see module doc)."""
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
            fs = make_session(rep.path, providers=providers)
            float_latency = metrics.latency_ms(metrics.ort_forward(fs), speed_ids, speed_mask)
            del fs
        results = []
        for scheme in schemes:
            ts = time.perf_counter()
            qcfg = recipe.quantize_config(scheme)
            if qcfg is None:
                raise ValueError("'float' is the reference; name quantized schemes only")
            qmodel = quantize(
                copy.deepcopy(float_model), qcfg, calibration_data=task.calibration_data(), progress=progress
            )
            wrapped = recipe.wrap(qmodel)
            file_bytes = latency = None
            if runtime == "ort":
                rep = export(wrapped, _example_inputs(), out_dir / f"{short}-{scheme}.onnx")
                file_bytes = rep.file_bytes
                sess = make_session(rep.path, providers=providers)
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
                quantized_layers=len(summary.quantized),
                float_layers=sorted(summary.skipped),
                keep_float=list(recipe.keep_float),
            )
            results.append(
                EvalResult(
                    model=recipe.name,
                    scheme=scheme,
                    config=qcfg.default.describe()
                    + ("" if qcfg.smoothing is None else f" smoothing {qcfg.smoothing}"),
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
                )
            )
            del qmodel, wrapped, fwd
    finally:
        if tmp is not None:
            tmp.cleanup()
    log.info("pyquant eval: %.0f s", time.perf_counter() - t0)
    return results


def _mib(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**20:.1f}"


def format_table(results: Sequence[EvalResult]) -> str:
    """Markdown table of results (one row per scheme)."""
    head = (
        "| model | scheme | metric | float | quantized | delta % | extra | file MiB (float) "
        "| latency ms (float) | runtime |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in results:
        extra = ", ".join(f"{k}={v:.4f}" for k, v in r.extra.items() if isinstance(v, float)) or "-"
        lat = "-" if r.latency_ms is None else f"{r.latency_ms:.1f}"
        if r.float_latency_ms is not None:
            lat += f" ({r.float_latency_ms:.1f})"
        lines.append(
            f"| {Path(r.model).name} | {r.scheme}: {r.config} | {r.metric} | {r.float_value:.4f} | "
            f"{r.quant_value:.4f} | {r.delta_pct:+.2f} | {extra} | "
            f"{_mib(r.file_bytes)} ({_mib(r.float_file_bytes)}) | {lat} | {r.runtime} |"
        )
    return "\n".join(lines)


def write_results(results: Sequence[EvalResult], base: str | Path, title: str = "", notes: str = "") -> None:
    """Write ``base``.json (machine-readable) and ``base``.md (table + notes)."""
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
    }
    base.with_suffix(".json").write_text(
        json.dumps({"environment": env, "results": [asdict(r) for r in results]}, indent=2) + "\n"
    )
    md = [
        f"# {title or 'pyquant accuracy'}",
        "",
        format_table(results),
        "",
        "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()),
        "",
    ]
    if notes:
        md += [notes, ""]
    base.with_suffix(".md").write_text("\n".join(md))


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)
