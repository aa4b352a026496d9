"""INT4 algorithm sweep on a recipe model: the float model is scored once, then each scheme is
quantized and scored, and the results file is rewritten after every scheme (a long sweep on a busy
machine keeps what it measured if it is stopped). Same data, metric and result format as
``pyquant eval`` (``pyquant.eval``), whose per-call loop would score the float model every time.

    PYTHONPATH=. python bench/int4_algos_sweep.py --model smollm2 --runtime torch \\
        --scheme int4-b128 --scheme int4-b128-gptq --results bench/results/<name>
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

import torch

from pyquant.eval import (
    EvalResult,
    _example_inputs,
    _model_bytes,
    _scheme_config,
    _Task,
    format_table,
    layer_precisions,
    write_results,
)
from pyquant.export import export
from pyquant.models import get_recipe, metrics
from pyquant.quantize import quantize


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--scheme", action="append", required=True)
    ap.add_argument("--runtime", choices=("torch", "ort"), default="torch")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--results", required=True, help="write <path>.md and <path>.json")
    ap.add_argument("--title", default="")
    ap.add_argument(
        "--calib-seqs",
        type=int,
        help="calibration sequences (causal LM; default: the recipe's eval_settings calib_seqs)",
    )
    ap.add_argument(
        "--float-from", help="take the float model's score from this results .json (same model and data)"
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the schemes already in <results>.json (and its float score)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    command = "PYTHONPATH=. python bench/int4_algos_sweep.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:]
    )
    torch.manual_seed(0)
    recipe = get_recipe(args.model)
    if args.calib_seqs is not None:
        if "calib_seqs" not in recipe.eval_settings or args.calib_seqs < 1:
            ap.error("--calib-seqs needs a causal-LM recipe and a positive count")
        recipe = dataclasses.replace(
            recipe, eval_settings={**recipe.eval_settings, "calib_seqs": args.calib_seqs}
        )
    float_model, tok = recipe.load()
    task = _Task(recipe, tok, quick=False, progress=True)
    results: list[EvalResult] = []
    old = Path(args.results + ".json")
    if args.resume and old.is_file():
        results = [EvalResult(**r) for r in json.loads(old.read_text())["results"]]
    if results:
        float_value = results[0].float_value
    elif args.float_from:
        float_value = json.loads(Path(args.float_from).read_text())["results"][0]["float_value"]
    else:
        float_value, _ = task.score(metrics.torch_forward(recipe.wrap(float_model)), "float (torch)")
    done = {r.scheme for r in results}
    tmp = tempfile.TemporaryDirectory(prefix="pyquant-sweep-")
    for item in args.scheme:
        if item in done:
            continue
        ts = time.perf_counter()
        scheme, qcfg, describe, _ = _scheme_config(recipe, float_model, item)
        # One thread while quantizing: the algorithms run many small tensor ops, which lose badly to
        # OpenMP synchronisation with several threads on a busy machine; the scoring matmuls do not.
        torch.set_num_threads(1)
        qmodel = quantize(
            copy.deepcopy(float_model), qcfg, calibration_data=task.calibration_data(), progress=True
        )
        torch.set_num_threads(args.threads)
        t_quant = time.perf_counter() - ts
        wrapped = recipe.wrap(qmodel)
        if args.runtime == "ort":
            from pyquant.ort import make_session

            rep = export(wrapped, _example_inputs(), Path(tmp.name) / "m.onnx")
            import onnxruntime

            so = onnxruntime.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
            fwd = metrics.ort_forward(make_session(rep.path, providers=("cpu",), options=so))
            rt = "onnxruntime-cpu"
        else:
            fwd, rt = metrics.torch_forward(wrapped), "torch"
        value, extra = task.score(fwd, f"{scheme} ({rt})")
        awq = qmodel.pyquant_summary.awq
        if awq is not None:
            extra["awq_mean_alpha"] = sum(awq.groups.values()) / max(len(awq.groups), 1)
            extra["awq_groups"] = len(awq.groups)
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
                seconds=time.perf_counter() - ts,
                extra={**extra, "quantize_seconds": round(t_quant, 1), "command": command},
                weight_bytes=_model_bytes(qmodel),
                float_weight_bytes=_model_bytes(float_model),
                precisions=layer_precisions(qmodel),
            )
        )
        print(
            f"{scheme}: {value:.4f} ({results[-1].delta_pct:+.2f} %), quantized in {t_quant:.0f} s",
            flush=True,
        )
        write_results(results, args.results, title=args.title, plot=False)
        del qmodel, wrapped, fwd
    tmp.cleanup()
    print(format_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
