"""Command line: ``pyquant quantize | export | eval | plan``.

    pyquant eval                                   # default: MiniLM, int4 (b128) and fp8, ORT CPU, speed
    pyquant eval --model smollm2 --scheme fp8      # float PyTorch vs exported FP8 model in ORT
    pyquant quantize --model minilm --scheme int4 --out minilm-int4.pt
    pyquant export --model minilm --checkpoint minilm-int4.pt --out minilm-int4.onnx
    pyquant export --model ./my-hf-model --scheme fp8-b128 --out model.onnx
    pyquant plan --model smollm2 --budget 1% --candidates fp8,int4-b128 -o plan.json
    pyquant eval --model smollm2 --plan plan.json   # also quantize / export --plan plan.json

``--model`` is a recipe name (see ``pyquant eval --list``) or a local HF model directory.
"""

from __future__ import annotations

import argparse
import fnmatch
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def _load_quantized(args: argparse.Namespace):  # noqa: ANN202
    from pyquant.models import get_recipe
    from pyquant.quantize import load_quantized, quantize

    plan = None
    if getattr(args, "plan", None):
        from pyquant.planner import Plan

        plan = Plan.load(args.plan)
        args.model = args.model or plan.model
        _check_plan_model(plan, args.model, args.plan)
    recipe = get_recipe(args.model or "minilm")
    model, tok = recipe.load()
    if getattr(args, "checkpoint", None):
        load_quantized(model, args.checkpoint)
        return recipe, model, tok
    cfg = plan.quantize_config(model) if plan is not None else recipe.quantize_config(args.scheme)
    if cfg is None:
        return recipe, model, tok
    if args.keep_float:
        cfg.exclude = tuple(cfg.exclude) + tuple(args.keep_float)
        # a plan names every layer in overrides, which take precedence over exclude
        cfg.overrides = {
            n: None if any(fnmatch.fnmatchcase(n, g) for g in args.keep_float) else c
            for n, c in cfg.overrides.items()
        }
    calib = None
    layer_cfgs = [cfg.default, *cfg.overrides.values()]
    if (
        cfg.smoothing is not None
        or any(getattr(c, "activation", "") == "static" for c in layer_cfgs)
        or any(getattr(c, "algorithm", "rtn") != "rtn" for c in layer_cfgs if c is not None)
    ):
        from pyquant.eval import _Task

        calib = _Task(recipe, tok, quick=False, progress=False).calibration_data()
    quantize(model, cfg, calibration_data=calib, progress=True)
    return recipe, model, tok


def _check_plan_model(plan, model: str, path: str) -> None:  # noqa: ANN001
    if Path(plan.model).name != Path(model).name:
        raise ValueError(f"plan {path} was made for model {plan.model!r}, not {model!r}")


def _cmd_quantize(args: argparse.Namespace) -> int:
    from pyquant.quantize import save_quantized

    _, model, _ = _load_quantized(args)
    save_quantized(model, args.out)
    s = model.pyquant_summary
    print(s.table())
    print(
        f"\n{len(s.quantized)} layers quantized, {len(s.skipped)} kept in float; "
        f"{s.float_bytes / 2**20:.1f} MiB of float weights -> {s.packed_bytes / 2**20:.1f} MiB packed; "
        f"saved {args.out}"
    )
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from pyquant.eval import _example_inputs
    from pyquant.export import export

    recipe, model, _ = _load_quantized(args)
    if args.dtype == "float16":
        model = model.half()
    if args.static_cache and not args.kv_cache:
        raise ValueError("--static-cache goes with --kv-cache (a generation graph)")
    if args.kv_cache:
        from pyquant.export_lm import export_causal_lm

        if recipe.task != "causal-lm":
            raise ValueError(f"--kv-cache needs a causal LM; {recipe.name!r} is an {recipe.task} model")

        rep = export_causal_lm(
            model, args.out, static_cache=args.static_cache, external_data=args.external_data
        )
    else:
        rep = export(recipe.wrap(model), _example_inputs(), args.out, external_data=args.external_data)
    print(rep)
    return 0


def default_eval_schemes(providers: list[str]) -> list[str]:
    """`pyquant eval`'s schemes without --scheme / --plan: INT4 and FP8, and on the CPU EP also INT4
    with int8 activations (accuracy_level 4: the CPU's fast INT4 path at the main job's batch, same
    accuracy on MiniLM; the CUDA kernels compute with X unquantized, so it would repeat "int4")."""
    return ["int4", "fp8"] if "cuda" in providers else ["int4", "int4-a8", "fp8"]


def _cmd_eval(args: argparse.Namespace) -> int:
    from pyquant.eval import evaluate, format_table, write_results
    from pyquant.models import RECIPES

    if args.list:
        for r in RECIPES.values():
            print(
                f"{r.name:10s} {r.title}\n{'':10s} packages: {', '.join(r.packages)}; metric: {r.metric}; "
                f"kept float: {', '.join(r.keep_float) or '-'}"
            )
        return 0
    command = "pyquant " + " ".join(shlex.quote(a) for a in args.argv)
    schemes: list = list(args.scheme or ([] if args.plan else default_eval_schemes(args.provider)))
    for path in args.plan:
        from pyquant.planner import Plan

        plan = Plan.load(path)
        args.model = args.model or plan.model
        _check_plan_model(plan, args.model, path)
        schemes.append((f"plan:{Path(path).stem}", plan))
    args.model = args.model or "minilm"
    results = evaluate(
        args.model,
        schemes,
        runtime=args.runtime,
        providers=tuple(args.provider),
        out_dir=args.out_dir,
        speed=not args.no_speed,
        quick=args.quick,
        progress=True,
        command=command,
        threads=args.threads,
        int4_gpu_layout=args.int4_gpu_layout,
    )
    print()
    print(format_table(results))
    if args.results:
        write_results(
            results, args.results, title=f"pyquant eval {args.model}", notes=f"Command: `{command}`"
        )
        print(f"\nwrote {Path(args.results).with_suffix('.md')} and .json")
    if args.max_delta is not None:
        bad = [r for r in results if abs(r.delta_pct) > args.max_delta]
        if bad:
            print(
                f"FAILED: |delta| > {args.max_delta}% for {', '.join(r.scheme for r in bad)}", file=sys.stderr
            )
            return 1
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from pyquant.eval import plan_model

    command = "pyquant " + " ".join(shlex.quote(a) for a in args.argv)
    cands = [c.strip() for c in ",".join(args.candidates).split(",") if c.strip()]
    plan = plan_model(
        args.model,
        args.budget,
        cands,
        proxy_tokens=args.proxy_tokens,
        verify_ort=not args.no_ort,
        max_evals=args.max_evals,
        max_ort_evals=args.max_ort_evals,
        providers=tuple(args.provider),
        threads=args.threads,
        sensitivity_cache=args.sensitivity_cache,
        quick=args.quick,
        progress=True,
        command=command,
    )
    plan.save(args.out)
    print()
    print(_plan_table(plan))
    print()
    print(plan.summary())
    print(f"\nwrote {args.out}")
    return 0 if plan.within_budget is not False else 1


def _plan_table(plan) -> str:  # noqa: ANN001
    """The plan's result as a markdown table in the style of `pyquant eval`."""
    lines = [
        "| model | plan | metric | float | verified | degradation % | runtime | planned linears MiB (float) "
        "| layers |",
        "|" + "---|" * 9,
    ]
    layers = "; ".join(f"{c}: {k}" for c, k in plan.counts().items())
    for rt, v in plan.verified.items():
        main = next(iter(v["values"].values()), float("nan"))
        lines.append(
            f"| {Path(plan.model).name} | budget {plan.budget * 100:g} % | {plan.metric} | "
            f"{plan.float_value or float('nan'):.4f} | {main:.4f} | {v['degradation'] * 100:+.2f} | {rt} | "
            f"{plan.nbytes() / 2**20:.1f} ({plan.float_nbytes() / 2**20:.1f}) | {layers} |"
        )
    if not plan.verified:
        lines.append(
            f"| {Path(plan.model).name} | budget {plan.budget * 100:g} % | {plan.metric} | - | - | "
            f"{plan.predicted * 100:+.2f} (predicted) | - | "
            f"{plan.nbytes() / 2**20:.1f} ({plan.float_nbytes() / 2**20:.1f}) | {layers} |"
        )
    return "\n".join(lines)


def _add_model_args(p: argparse.ArgumentParser, scheme_default: str | None) -> None:
    p.add_argument(
        "--model", help="recipe name (smollm2, minilm) or HF model directory (default: the plan's, or minilm)"
    )
    p.add_argument(
        "--scheme",
        default=scheme_default,
        help="float, int4, fp8, int4-b64, int4-b128-asym, fp8-channel, fp8-b128, fp8-b128-static ...",
    )
    p.add_argument(
        "--keep-float",
        action="append",
        default=[],
        metavar="GLOB",
        help="extra layers to keep in float (repeatable)",
    )
    p.add_argument("--plan", help="a plan from `pyquant plan` (its per-layer config instead of --scheme)")


def build_parser() -> argparse.ArgumentParser:
    from pyquant.ort import INT4_GPU_LAYOUTS

    ap = argparse.ArgumentParser(
        prog="pyquant", description="Quantize, export and evaluate models for the pyquant ONNX Runtime ops."
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    sub = ap.add_subparsers(dest="cmd")

    q = sub.add_parser("quantize", help="quantize a model and save the packed checkpoint")
    _add_model_args(q, "int4")
    q.add_argument("--out", required=True, help="checkpoint path (.pt)")
    q.set_defaults(fn=_cmd_quantize)

    e = sub.add_parser("export", help="export a (quantized) model to ONNX with pyquant ops")
    _add_model_args(e, "int4")
    e.add_argument("--checkpoint", help="a checkpoint from `pyquant quantize` (instead of --scheme)")
    e.add_argument("--out", required=True, help="output .onnx path")
    e.add_argument(
        "--external-data",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="weights in <out>.data (default: only when over 2 GB)",
    )
    e.add_argument(
        "--kv-cache",
        action="store_true",
        help="causal LMs: export for generation, with the KV cache as inputs / outputs "
        "(pyquant.export_causal_lm; run it with pyquant.ort.generate)",
    )
    e.add_argument(
        "--static-cache",
        action="store_true",
        help="with --kv-cache: a fixed-length cache written at cache_position, whose decode steps "
        "pyquant.ort.generate replays as CUDA graphs on a session with enable_cuda_graph",
    )
    e.add_argument(
        "--dtype",
        choices=("float32", "float16"),
        default="float32",
        help="activation dtype of the exported model (float16 for the CUDA EP's fast kernels)",
    )
    e.set_defaults(fn=_cmd_export)

    v = sub.add_parser("eval", help="float PyTorch vs quantized export in ORT on the recipe's metric")
    v.add_argument("--model", help="recipe name or HF model directory (default: the plan's, or minilm)")
    v.add_argument(
        "--scheme",
        action="append",
        help="repeatable; default: int4, int4-a8 (CPU EP only) and fp8 (none with --plan)",
    )
    v.add_argument(
        "--plan", action="append", default=[], metavar="PLAN_JSON", help="evaluate a plan (repeatable)"
    )
    v.add_argument(
        "--runtime",
        choices=("ort", "torch"),
        default="ort",
        help="run the quantized model in ONNX Runtime (default) or in PyTorch eager",
    )
    v.add_argument("--provider", action="append", default=[], help="ORT provider (cpu, cuda); default cpu")
    v.add_argument(
        "--int4-gpu-layout",
        choices=tuple(INT4_GPU_LAYOUTS),
        help="MatMulInt4's weight layout on a Hopper GPU (default: PYQUANT_INT4_SHUFFLE, else 'default'; "
        "'all': every layer in the tensor-core order, faster prefill; docs/ops.md)",
    )
    v.add_argument("--out-dir", help="keep the exported .onnx files here (default: a temporary directory)")
    v.add_argument("--results", help="write <path>.md and <path>.json")
    v.add_argument("--no-speed", action="store_true", help="skip the float export and latency measurement")
    v.add_argument("--quick", action="store_true", help="small data subset (smoke test)")
    v.add_argument("--max-delta", type=float, help="exit 1 if any |delta %%| exceeds this")
    v.add_argument("--list", action="store_true", help="list the model recipes and exit")
    v.set_defaults(fn=_cmd_eval)

    pl = sub.add_parser("plan", help="per-layer precision under an accuracy budget (sensitivity + verify)")
    pl.add_argument("--model", default="smollm2", help="recipe name or HF model directory (default: smollm2)")
    pl.add_argument("--budget", default="1%", help="allowed relative degradation: 1%% or 0.01 (default 1%%)")
    pl.add_argument(
        "--candidates",
        action="append",
        default=None,
        help="comma-separated scheme names (float is always added); default fp8,int4-b128. AWQ ones "
        "(e.g. int4-b64-asym-awq-gptq-act) AWQ-scale every planned group first, then keep their final "
        "quantizer (GPTQ / clipping search) per layer",
    )
    pl.add_argument("-o", "--out", required=True, help="plan file (.json)")
    pl.add_argument(
        "--proxy-tokens", type=int, help="calibration tokens of the causal-LM proxy (default 256)"
    )
    pl.add_argument("--max-evals", type=int, default=6, help="torch eager verifications (default 6)")
    pl.add_argument("--max-ort-evals", type=int, default=3, help="ONNX Runtime verifications (default 3)")
    pl.add_argument("--no-ort", action="store_true", help="verify in torch eager only")
    pl.add_argument("--provider", action="append", default=[], help="ORT provider; default cpu")
    pl.add_argument(
        "--sensitivity-cache", help="JSON file: reuse the per-layer proxies stored there, store new ones"
    )
    pl.add_argument("--quick", action="store_true", help="small data subset (smoke test)")
    pl.set_defaults(fn=_cmd_plan)
    for p in (q, e, v, pl):
        p.add_argument(
            "--threads",
            type=int,
            help="torch and ONNX Runtime threads (default: all cores; 1 is faster on a busy machine)",
        )
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help", "-v", "--verbose"):
        argv = ["eval", *argv]  # `pyquant` alone runs the default evaluation
    args = ap.parse_args(argv)
    if args.cmd is None:
        args = ap.parse_args(["eval", *argv])
    args.argv = argv
    if getattr(args, "provider", None) == []:
        args.provider = ["cpu"]
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)
    if getattr(args, "candidates", None) is None and args.cmd == "plan":
        args.candidates = ["fp8,int4-b128"]
    try:
        return args.fn(args)
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"pyquant {args.cmd}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
