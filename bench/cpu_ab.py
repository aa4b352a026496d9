"""A / B of two builds of the op library on the CPU, alternating, on a machine whose timings drift.

    python bench/cpu_ab.py --lib-a old/libpyquant_ops.so --lib-b new/libpyquant_ops.so --rounds 5 \\
        --shapes 384x1536,1536x384,384x384 --m 1024 [--models a.onnx,b.onnx] --out bench/results/<name>

Per round, each library runs ``bench/bench_cpu.py`` (per-layer ops; fp32 MLAS alongside) in its own
process (PYQUANT_LIBRARY selects the build; a process loads one), then each ``--models`` file is timed
the same way (the median of ``session.run`` over a few seconds, input_ids / attention_mask of
8 x 128 tokens: the main job's speed batch). The order of A and B alternates by round. Reported per
point: the minimum and the median over rounds. The minimum is the figure least disturbed by other
tenants of a shared machine; the spread shows how far to trust it. ``--threads 1 --clock thread``
times the per-layer points in CPU time of the calling thread (bench_cpu.py), which a loaded host
disturbs least; the ``--models`` timings stay wall clock.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LINE = re.compile(r"K=\s*(\d+) N=\s*(\d+) M=\s*(\d+) (\S+)\s+([\d.]+) ms")

MODEL_TIMER = """
import sys, time, numpy as np, onnxruntime as ort
from pyquant.ort import make_session
so = ort.SessionOptions(); so.intra_op_num_threads = int(sys.argv[3])
sess = make_session(sys.argv[1], options=so)
g = np.random.default_rng(0); ids = g.integers(5, 1000, size=(8, 128), dtype=np.int64)
feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
for _ in range(2): sess.run(None, feeds)
t = []; t0 = time.perf_counter()
while time.perf_counter() - t0 < float(sys.argv[2]) or len(t) < 5:
    a = time.perf_counter(); sess.run(None, feeds); t.append(time.perf_counter() - a)
print(f"MODEL {np.median(t) * 1e3:.3f}")
"""


def run(lib: str, cmd: list[str]) -> str:
    env = {
        **os.environ,
        "PYQUANT_LIBRARY": lib,
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return out.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib-a", required=True)
    ap.add_argument("--lib-b", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--methods", default="pyquant_int4_b128,pyquant_fp8,fp32_matmul")
    ap.add_argument("--shapes", default="384x1536,1536x384,384x384")
    ap.add_argument("--m", default="1024")
    ap.add_argument("--models", default="", help="ONNX files to time whole (comma-separated)")
    ap.add_argument("--model-seconds", type=float, default=4.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=["wall", "thread"], default="wall", help="bench_cpu.py's --clock")
    ap.add_argument("--out", default=None, help="path prefix for .json / .md")
    args = ap.parse_args(argv)
    libs = {"A": args.lib_a, "B": args.lib_b}
    times: dict[tuple, list[float]] = defaultdict(list)
    bench = [
        sys.executable,
        os.path.join(HERE, "bench_cpu.py"),
        "--methods",
        args.methods,
        "--shapes",
        args.shapes,
    ]
    bench += ["--m", args.m, "--threads", str(args.threads), "--clock", args.clock, "--budget", "1.0"]
    models = [m for m in args.models.split(",") if m]
    for r in range(args.rounds):
        for tag in ("A", "B") if r % 2 == 0 else ("B", "A"):
            for m in LINE.finditer(run(libs[tag], bench)):
                k, n, mm, method, ms = m.groups()
                times[(f"{method} {k}x{n} M={mm}", tag)].append(float(ms))
            for path in models:
                out = run(
                    libs[tag],
                    [sys.executable, "-c", MODEL_TIMER, path, str(args.model_seconds), str(args.threads)],
                )
                times[(os.path.basename(path), tag)].append(float(out.split("MODEL")[1]))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    points = sorted({p for p, _ in times})
    lines = [
        f"A = `{args.lib_a}`, B = `{args.lib_b}`; {args.rounds} rounds, A / B order alternating; "
        f"ms, min (median) over rounds; {args.threads} threads, {args.clock} clock.",
        "",
        "| point | A | B | A / B (min) |",
        "|---|---|---|---|",
    ]
    rows = []
    for p in points:
        a, b = times.get((p, "A"), []), times.get((p, "B"), [])
        cell = lambda v: f"{min(v):.2f} ({statistics.median(v):.2f})" if v else "-"  # noqa: E731
        ratio = f"{min(a) / min(b):.2f}x" if a and b else "-"
        lines.append(f"| {p} | {cell(a)} | {cell(b)} | {ratio} |")
        rows.append({"point": p, "a_ms": a, "b_ms": b})
    md = "\n".join(lines)
    print(md)
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump({"args": vars(args), "command": " ".join(sys.argv), "rows": rows}, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
