"""Command line: ``pyquant quantize | export | eval``.

    pyquant eval                                   # default: MiniLM, int4 (b128) and fp8, ORT CPU, speed
    pyquant eval --model smollm2 --scheme fp8      # float PyTorch vs exported FP8 model in ORT
    pyquant quantize --model minilm --scheme int4 --out minilm-int4.pt
    pyquant export --model minilm --checkpoint minilm-int4.pt --out minilm-int4.onnx
    pyquant export --model ./my-hf-model --scheme fp8-b128 --out model.onnx

``--model`` is a recipe name (see ``pyquant eval --list``) or a local HF model directory.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def _load_quantized(args: argparse.Namespace):  # noqa: ANN202
    from pyquant.models import get_recipe
    from pyquant.quantize import load_quantized, quantize

    recipe = get_recipe(args.model)
    model, tok = recipe.load()
    if getattr(args, "checkpoint", None):
        load_quantized(model, args.checkpoint)
        return recipe, model, tok
    cfg = recipe.quantize_config(args.scheme)
    if cfg is None:
        return recipe, model, tok
    if args.keep_float:
        cfg.exclude = tuple(cfg.exclude) + tuple(args.keep_float)
    calib = None
    default = cfg.default
    if "static" in args.scheme or cfg.smoothing is not None or getattr(default, "algorithm", "rtn") != "rtn":
        from pyquant.eval import _Task

        calib = _Task(recipe, tok, quick=False, progress=False).calibration_data()
    quantize(model, cfg, calibration_data=calib, progress=True)
    return recipe, model, tok


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
    rep = export(recipe.wrap(model), _example_inputs(), args.out, external_data=args.external_data)
    print(rep)
    return 0


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
    results = evaluate(
        args.model,
        args.scheme or ["int4", "fp8"],
        runtime=args.runtime,
        providers=tuple(args.provider),
        out_dir=args.out_dir,
        speed=not args.no_speed,
        quick=args.quick,
        progress=True,
        command=command,
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


def _add_model_args(p: argparse.ArgumentParser, scheme_default: str | None) -> None:
    p.add_argument("--model", default="minilm", help="recipe name (smollm2, minilm) or HF model directory")
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


def build_parser() -> argparse.ArgumentParser:
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
    e.set_defaults(fn=_cmd_export)

    v = sub.add_parser("eval", help="float PyTorch vs quantized export in ORT on the recipe's metric")
    v.add_argument("--model", default="minilm", help="recipe name or HF model directory (default: minilm)")
    v.add_argument("--scheme", action="append", help="repeatable; default: int4 and fp8")
    v.add_argument(
        "--runtime",
        choices=("ort", "torch"),
        default="ort",
        help="run the quantized model in ONNX Runtime (default) or in PyTorch eager",
    )
    v.add_argument("--provider", action="append", default=[], help="ORT provider (cpu, cuda); default cpu")
    v.add_argument("--out-dir", help="keep the exported .onnx files here (default: a temporary directory)")
    v.add_argument("--results", help="write <path>.md and <path>.json")
    v.add_argument("--no-speed", action="store_true", help="skip the float export and latency measurement")
    v.add_argument("--quick", action="store_true", help="small data subset (smoke test)")
    v.add_argument("--max-delta", type=float, help="exit 1 if any |delta %%| exceeds this")
    v.add_argument("--list", action="store_true", help="list the model recipes and exit")
    v.set_defaults(fn=_cmd_eval)
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
    try:
        return args.fn(args)
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"pyquant {args.cmd}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
