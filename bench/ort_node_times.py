"""Per-op-type node times of an ONNX model in ONNX Runtime, from ORT's own profiler (numpy + onnxruntime).

    python bench/ort_node_times.py model.onnx [more.onnx ...] --lib libpyquant_ops.so --provider cuda \\
        --shape 1x128 --runs 10 --out bench/results/<name>.json

Why: a whole-model latency without CUDA graphs mixes host work per node (the op's Compute: checks,
planning, the launch call) with GPU time. ORT's profiler times each node's Compute on the host; on the
CUDA EP kernels run asynchronously, so that time is the host side of the node, and the sum over nodes
against the run's wall time shows whether the model is host-bound. Reported per op type: nodes, mean
and median microseconds per node per run, total per run; and the run's wall time.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_ep_real_models import _device_name, _session  # noqa: E402


def node_times(ort, path: Path, lib: str, provider: str, shape: tuple[int, int], runs: int) -> dict:  # noqa: ANN001
    ids = np.random.default_rng(0).integers(5, 1000, size=shape, dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    with tempfile.TemporaryDirectory() as tmp:
        sess = _session(ort, path, lib, provider, 0, profile=str(Path(tmp) / path.stem))
        for _ in range(3):  # warm-up (first-run allocations, cuBLAS handles) is in the profile too
            sess.run(None, feeds)
        t0 = time.perf_counter()
        for _ in range(runs):
            sess.run(None, feeds)
        wall_ms = (time.perf_counter() - t0) / runs * 1e3
        events = json.loads(Path(sess.end_profiling()).read_text())
    per_op: dict[str, list[float]] = {}
    model_runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    start = model_runs[-runs]["ts"] if len(model_runs) >= runs else 0  # only the timed runs
    for e in events:
        a = e.get("args", {})
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= start:
            per_op.setdefault(f"{a.get('op_name')}@{a.get('provider')}", []).append(float(e["dur"]))
    ops = {
        k: {
            "nodes": len(v) // runs,
            "mean_us": float(np.mean(v)),
            "median_us": float(np.median(v)),
            "total_us_per_run": float(np.sum(v)) / runs,
        }
        for k, v in sorted(per_op.items(), key=lambda kv: -sum(kv[1]))
    }
    return {
        "model": path.name,
        "shape": list(shape),
        "wall_ms_per_run": wall_ms,
        "node_us_per_run": sum(o["total_us_per_run"] for o in ops.values()),
        "ops": ops,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--lib", default=os.environ.get("PYQUANT_LIBRARY"))
    ap.add_argument("--provider", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--shape", default="1x128")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import onnxruntime as ort

    shape = tuple(int(v) for v in args.shape.split("x"))
    results = [node_times(ort, Path(m), args.lib, args.provider, shape, args.runs) for m in args.models]
    o = {
        "device": _device_name(args.provider),
        "onnxruntime": ort.__version__,
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "results": results,
    }
    Path(args.out).write_text(json.dumps(o, indent=1) + "\n")
    lines = [f"# ORT node times ({o['device']}, onnxruntime {o['onnxruntime']}, shape {args.shape})", ""]
    for r in results:
        lines += [
            f"## {r['model']}: {r['wall_ms_per_run']:.2f} ms per run, "
            f"nodes' host time {r['node_us_per_run'] / 1e3:.2f} ms",
            "",
            "| op | nodes | mean us | median us | us per run |",
            "|---|---|---|---|---|",
        ]
        for k, v in list(r["ops"].items())[:12]:
            lines.append(
                f"| {k} | {v['nodes']} | {v['mean_us']:.1f} | {v['median_us']:.1f} "
                f"| {v['total_us_per_run']:.0f} |"
            )
        lines.append("")
    lines.append(f"Command: `{o['command']}`")
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
