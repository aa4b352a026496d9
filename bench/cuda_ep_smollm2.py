"""SmolLM2-135M on ONNX Runtime's CUDA execution provider: the recipe's INT4 and FP8, perplexity.

Two steps, on two machines (as ``bench/cuda_ep_real_models.py`` does for MiniLM):

    # here (CPU, pyquant + torch + transformers + the offline model packages installed):
    python bench/cuda_ep_smollm2.py prepare --out .device/smollm2
    # on the GPU machine (numpy + onnxruntime-gpu + the built libpyquant_ops.so):
    python bench/cuda_ep_smollm2.py run --dir .device/smollm2 --lib <libpyquant_ops.so> \\
        --out bench/results/<date>-<gpu>-cuda-ep-smollm2.json

``prepare`` quantizes the float32 model with the recipe's ``int4`` (AWQ + GPTQ act-order, block 64
with 4-bit zero points, on the recipe's 64 calibration sequences) and ``fp8`` (per-channel weights,
dynamic per-token activations), casts each to float16 (on CUDA, float32 X would run the reference
kernels, not the tuned ones) and exports it (logits from input_ids / attention_mask). The token
embedding, which both models keep in float16, goes to ``shared.bin``; each model's own weights to
``<name>.bin`` (``cuda_ep_real_models._externalize``). ``data.npz`` holds the recipe's evaluation
tokens (8 x 512 wiki tokens, the ones ``pyquant eval`` scores).

``run`` imports only numpy and onnxruntime: per model, where ORT placed the nodes, the perplexity
(exp of the mean next-token NLL over positions 1..511 of each sequence, batches of 2, float64
log-softmax: ``pyquant.models.metrics.perplexity``) and the latency of one forward per ``--shapes``
batch shape (default 2 x 512; inputs bound on the device, no KV cache).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_ep_real_models import (  # noqa: E402
    DATA,
    MANIFEST,
    _build_info,
    _device_name,
    _latency,
    _placement,
    _session,
    manifest_head,
    write_models,
)


def prepare(args: argparse.Namespace) -> int:
    import copy

    import onnx
    import torch

    from pyquant.eval import _example_inputs, _Task
    from pyquant.export import export, verify_onnx_model
    from pyquant.models import get_recipe
    from pyquant.quantize import quantize

    t0 = time.perf_counter()
    torch.manual_seed(0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for p in out.iterdir():
        if p.is_file() and (p.suffix in (".onnx", ".bin", ".npz") or p.name == MANIFEST):
            p.unlink()
    recipe = get_recipe("smollm2")
    model, tok = recipe.load()
    task = _Task(recipe, tok, quick=False, progress=False)
    ids = np.asarray(task.ids, dtype=np.int64)
    protos: dict[str, Any] = {}
    entries = []
    with tempfile.TemporaryDirectory(prefix="pyquant-smollm2-") as tmp:
        for scheme in args.schemes:
            if scheme.startswith("plan:"):  # a plan file from `pyquant plan --model smollm2`
                from pyquant.planner import Plan

                plan_path = scheme[len("plan:") :]
                cfg = Plan.load(plan_path).quantize_config(model)
                scheme = "plan-" + Path(plan_path).stem
            else:
                cfg = recipe.quantize_config(scheme)  # None for "float"
            q = copy.deepcopy(model)
            if cfg is not None:
                torch.set_num_threads(1)  # the algorithms' small ops lose to OpenMP synchronisation
                q = quantize(q, cfg, calibration_data=task.calibration_data())
                torch.set_num_threads(2)
            q = recipe.wrap(q).to(torch.float16).eval()
            name = f"smollm2-{scheme}-float16"
            rep = export(q, _example_inputs(), Path(tmp) / f"{name}.onnx")
            protos[name] = onnx.load(str(rep.path))
            entries.append(
                {
                    "name": name,
                    "scheme": scheme,
                    "config": "float" if cfg is None else _describe(cfg),
                    "pyquant_ops": verify_onnx_model(rep.path),
                    "export_bytes": rep.file_bytes,
                }
            )
            print(f"prepare: {name}: {rep}", flush=True)
            del q
    sizes = write_models(protos, entries, {"ids": ids}, out)
    manifest = {
        **manifest_head(recipe),
        "batch_size": recipe.eval_settings["batch_size"],
        "float32_torch_perplexity": args.float_perplexity,
        "models": entries,
        "file_bytes": sizes,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    for k, v in sizes.items():
        print(f"  {k:40s} {v / 2**20:8.2f} MiB")
    print(f"prepare: {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


def _describe(cfg: Any) -> str:
    if cfg.default is not None:
        return cfg.default.describe()
    kinds: dict[str, int] = {}
    for c in cfg.overrides.values():
        k = "float" if c is None else c.describe()
        kinds[k] = kinds.get(k, 0) + 1
    return "plan: " + ", ".join(f"{k} x {n}" for k, n in kinds.items())


def _log_softmax_at(logits: np.ndarray, target: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    m = x.max(-1, keepdims=True)
    lse = m[..., 0] + np.log(np.exp(x - m).sum(-1))
    return np.take_along_axis(x, target[..., None], -1)[..., 0] - lse


def run(args: argparse.Namespace) -> int:
    import onnxruntime as ort

    d = Path(args.dir)
    lib = args.lib or os.environ.get("PYQUANT_LIBRARY")
    if not lib:
        raise SystemExit("--lib or PYQUANT_LIBRARY: the built libpyquant_ops.so")
    man = json.loads((d / MANIFEST).read_text())
    ids = np.load(d / DATA)["ids"]
    bs = int(man["batch_size"])
    ref = float(man["float32_torch_perplexity"])
    results = []
    for e in man["models"]:
        path = d / f"{e['name']}.onnx"
        missing = [f for f in e["files"] if not (d / f).is_file()]
        if missing:
            results.append({"name": e["name"], "skipped": f"missing {missing}"})
            continue
        t = time.perf_counter()
        sess = _session(ort, path, lib, args.provider, args.threads)
        nll, count = 0.0, 0
        for s in range(0, ids.shape[0], bs):
            x = ids[s : s + bs]
            logits = sess.run(None, {"input_ids": x, "attention_mask": np.ones_like(x)})[0]
            nll -= float(_log_softmax_at(logits[:, :-1], x[:, 1:]).sum())
            count += x[:, 1:].size
        ppl = float(np.exp(nll / count))
        with tempfile.TemporaryDirectory() as tmp:
            feeds = {"input_ids": ids[:bs], "attention_mask": np.ones_like(ids[:bs])}
            place = _placement(ort, path, lib, args.provider, args.threads, feeds, Path(tmp))
        shapes = [tuple(int(v) for v in sh.split("x")) for sh in args.shapes.split(",")]
        lat = [_latency(ort, sess, args.provider, sh, args.warmup, args.runs) for sh in shapes]
        results.append(
            {
                **{k: e[k] for k in ("name", "scheme", "config")},
                "perplexity": ppl,
                "delta_pct_vs_float32_torch": 100.0 * (ppl / ref - 1.0),
                "latency": lat,
                **place,
                "seconds": round(time.perf_counter() - t, 1),
            }
        )
        print(json.dumps(results[-1]), flush=True)
        del sess
    o = {
        "device": _device_name(args.provider),
        "onnxruntime": ort.__version__,
        "library": lib,
        "build_info": _build_info(lib),
        "prepared": {k: man[k] for k in ("created", "command", "git_commit")},
        "float32_torch_perplexity": ref,
        "tokens": list(ids.shape),
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "results": results,
    }
    Path(args.out).write_text(json.dumps(o, indent=1) + "\n")
    rows = [
        "| model | config | perplexity | vs float32 torch | ms at "
        + args.shapes.replace(",", " / ")
        + " | pyquant nodes |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        if "skipped" in r:
            rows.append(f"| {r['name']} | skipped: {r['skipped']} | | | | |")
            continue
        ms = " / ".join(format(x["median_ms"], ".2f") for x in r["latency"])
        rows.append(
            f"| {r['name']} | {r['config']} | {r['perplexity']:.4f} "
            f"| {r['delta_pct_vs_float32_torch']:+.2f} % "
            f"| {ms} | {r['pyquant_nodes']} |"
        )
    md = [
        "# SmolLM2-135M on ONNX Runtime's CUDA EP: the recipe's INT4 and FP8 (float16 activations)",
        "",
        f"Device: {o['device']}. onnxruntime {o['onnxruntime']}. Prepared at {man['git_commit']}.",
        f"Evaluation: {ids.shape[0]} x {ids.shape[1]} wiki tokens (the recipe's); "
        f"float32 torch perplexity {ref:.4f}.",
        "",
        *rows,
        "",
        f"Command: `{o['command']}`; prepared by `{man['command']}`.",
    ]
    Path(args.out).with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", default=".device/smollm2")
    p.add_argument(
        "--schemes", nargs="+", default=["int4", "fp8"], help="recipe schemes, float, or plan:<plan.json>"
    )
    p.add_argument(
        "--float-perplexity",
        type=float,
        default=13.747632972852822,
        help="the float32 torch perplexity on the same tokens "
        "(bench/results/2026-11-26-cpu-s28-smollm2-calib64b.json)",
    )
    r = sub.add_parser("run")
    r.add_argument("--dir", default=".device/smollm2")
    r.add_argument("--provider", default="cuda", choices=["cuda", "cpu"])
    r.add_argument("--lib", default=None)
    r.add_argument("--out", required=True)
    r.add_argument("--threads", type=int, default=0)
    r.add_argument("--warmup", type=int, default=5)
    r.add_argument("--runs", type=int, default=20)
    r.add_argument("--shapes", default="2x512", help="latency batch shapes BxL, comma-separated")
    args = ap.parse_args(argv)
    return prepare(args) if args.cmd == "prepare" else run(args)


if __name__ == "__main__":
    raise SystemExit(main())
