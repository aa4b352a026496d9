"""SmolLM2 INT4 with and without the residual-stream rotation (pyquant.rotation), torch eager.

    PYTHONPATH=. python bench/smollm2_rotation.py --rotation hadamard --algorithm awq-gptq \\
        [--degrid] [--heads] --results bench/results/<name>.json

The recipe's INT4 scheme (block 64, 4-bit zero points, act-order) with the given algorithm, on the
recipe's calibration and evaluation data; prints and appends one JSON line per run.

--degrid moves every decoder linear weight uniformly within its Q4_1 block-32 step first (seeded):
SmolLM2's float weights are the GGUF file's Q4_1 grid, which favours quantizers that work in the
original basis (a block of 64 holds two grid blocks); the de-gridded model has weights off any grid,
as a model trained in float has. Its own float perplexity is the reference then (--algorithm float).
--heads also rotates each value / o_proj head (an experiment: ``rotate_residual(heads=True)``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time

import torch

from pyquant.eval import _Task, git_commit
from pyquant.models import get_recipe, metrics
from pyquant.quantize import quantize
from pyquant.rotation import rotate_residual


def degrid(model: torch.nn.Module, seed: int = 123) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.Linear) and ".layers." in name:
                w = m.weight.reshape(m.out_features, -1, 32)
                step = (w.amax(-1, keepdim=True) - w.amin(-1, keepdim=True)) / 15
                w += (torch.rand(w.shape, generator=g) - 0.5) * step


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rotation", choices=("none", "hadamard", "random"), default="hadamard")
    ap.add_argument("--algorithm", default="awq-gptq", help="an INT4 algorithm, or 'float' (no quantization)")
    ap.add_argument("--degrid", action="store_true")
    ap.add_argument("--heads", action="store_true")
    ap.add_argument("--results", required=True, help="JSON lines file to append to")
    args = ap.parse_args()
    args_text = " ".join(shlex.quote(a) for a in sys.argv[1:])
    command = "PYTHONPATH=. python bench/smollm2_rotation.py " + args_text
    torch.manual_seed(0)
    recipe = get_recipe("smollm2")
    model, tok = recipe.load()
    task = _Task(recipe, tok, quick=False, progress=False)
    t = time.perf_counter()
    if args.degrid:
        degrid(model)
    if args.rotation != "none":
        rotate_residual(model, args.rotation, heads=args.heads)
    torch.set_num_threads(1)  # the algorithms' many small ops lose to OpenMP synchronisation
    if args.algorithm != "float":
        qcfg = recipe.quantize_config("int4")
        qcfg = dataclasses.replace(qcfg, default=dataclasses.replace(qcfg.default, algorithm=args.algorithm))
        model = quantize(model, qcfg, calibration_data=task.calibration_data())
    torch.set_num_threads(2)
    ppl, _ = task.score(metrics.torch_forward(recipe.wrap(model)), args.algorithm)
    row = {
        "rotation": args.rotation,
        "heads": args.heads,
        "degrid": args.degrid,
        "algorithm": args.algorithm,
        "perplexity": ppl,
        "seconds": round(time.perf_counter() - t, 1),
        "commit": git_commit(),
        "command": command,
    }
    print(json.dumps(row), flush=True)
    with open(args.results, "a") as f:
        f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
