"""Peak memory and time of calibrated quantization, block by block against one pass over the model.

Each mode runs in a fresh process (peak RSS is per process): the recipe model is loaded, its
calibration data built, then ``pyquant.quantize`` runs with the scheme; the process reports the
peak RSS growth during ``quantize`` (ru_maxrss after it minus before it) and the wall time.
"one-pass" forces the whole-model statistics pass (``block_stages`` answering one stage), the
behaviour before session 29. Writes <results>.md and <results>.json.

    PYTHONPATH=. python bench/calib_memory.py --model smollm2 --scheme int4-b128-asym-gptq \\
        --calib-seqs 16 --results bench/results/<name>
    PYTHONPATH=. python bench/calib_memory.py --synthetic 2048,5632,4 --results bench/results/<name>

``--synthetic HIDDEN,INTERMEDIATE,LAYERS``: instead of a recipe, a randomly initialised Llama of that
shape (vocab 1024, 4 batches of 2 x 256 random tokens) quantized with GPTQ block 128 asymmetric, for
layer widths of larger models than the installed ones (the x^T x of one-pass calibration grow as K^2
per layer input).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib
import json
import platform
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

MODES = ("by-block", "one-pass")


def _measure(model_name: str, scheme: str, calib_seqs: int, mode: str, synthetic: str | None) -> dict:
    import torch

    from pyquant.config import Int4Config, QuantizeConfig
    from pyquant.quantize import quantize

    q = importlib.import_module("pyquant.quantize")  # the module (pyquant.quantize is the function)
    if mode == "one-pass":
        q.block_stages = lambda model, units, *a: ([(0, list(units))], None)
    torch.set_num_threads(1)
    if synthetic:
        import transformers

        hidden, inter, layers = (int(v) for v in synthetic.split(","))
        cfg = transformers.LlamaConfig(
            vocab_size=1024,
            hidden_size=hidden,
            intermediate_size=inter,
            num_hidden_layers=layers,
            num_attention_heads=hidden // 128,
            num_key_value_heads=hidden // 128,
            max_position_embeddings=256,
        )
        torch.manual_seed(0)
        float_model = transformers.LlamaForCausalLM(cfg).eval()
        g = torch.Generator().manual_seed(1)
        batches = [torch.randint(0, 1024, (2, 256), generator=g) for _ in range(4)]
        qcfg = QuantizeConfig(default=Int4Config(128, symmetric=False, algorithm="gptq"), exclude=["lm_head"])
        describe = (
            f"random Llama {hidden} x {inter} x {layers} layers, int4 b128 asym gptq, excluding lm_head"
        )
    else:
        from pyquant.eval import _scheme_config, _Task
        from pyquant.models import get_recipe

        recipe = get_recipe(model_name)
        recipe = dataclasses.replace(recipe, eval_settings={**recipe.eval_settings, "calib_seqs": calib_seqs})
        float_model, tok = recipe.load()
        batches = list(_Task(recipe, tok, quick=False, progress=False).calibration_data())
        _, qcfg, describe, _ = _scheme_config(recipe, float_model, scheme)
    model = copy.deepcopy(float_model)
    del float_model
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    quantize(model, qcfg, calibration_data=batches)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "mode": mode,
        "config": describe,
        "quantize_seconds": round(seconds, 1),
        "peak_rss_growth_mib": round((after - before) / 1024, 1),  # ru_maxrss: KiB on Linux
        "peak_rss_mib": round(after / 1024, 1),
        "batches": len(batches),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--scheme", default="int4-b128-asym-gptq")
    ap.add_argument("--calib-seqs", type=int, default=16)
    ap.add_argument("--synthetic", help="HIDDEN,INTERMEDIATE,LAYERS: a random Llama instead of --model")
    ap.add_argument("--results", help="write <path>.md and <path>.json")
    ap.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)  # child process: one mode
    args = ap.parse_args()
    if args.one:
        print(
            json.dumps(_measure(args.model, args.scheme, args.calib_seqs, args.one, args.synthetic)),
            flush=True,
        )
        return 0
    command = "PYTHONPATH=. python bench/calib_memory.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    rows = []
    for mode in MODES:
        out = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:], "--one", mode],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    what = f"random Llama {args.synthetic}" if args.synthetic else f"{args.model}, {args.scheme}"
    lines = [
        f"# Calibration memory and time: {what}, {rows[0]['batches']} batches",
        "",
        "| mode | quantize s | peak RSS growth during quantize MiB | peak RSS MiB |",
        "|---|---|---|---|",
        *(
            f"| {r['mode']} | {r['quantize_seconds']} | {r['peak_rss_growth_mib']} | {r['peak_rss_mib']} |"
            for r in rows
        ),
        "",
        f"Config: {rows[0]['config']}; {rows[0]['batches']} batches; one torch thread; one process per mode.",
        f"Command: `{command}`; commit {commit}; {platform.machine()}, {platform.python_version()}.",
    ]
    if args.results:
        Path(args.results + ".md").write_text("\n".join(lines) + "\n")
        Path(args.results + ".json").write_text(
            json.dumps({"command": command, "commit": commit, "results": rows}, indent=1) + "\n"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
