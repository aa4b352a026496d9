"""CPU benchmark of pyquant's ops against ORT's own kernels (CPU execution provider), per layer.

    python bench/bench_cpu.py --out bench/results --date 2026-11-22

One single-node model per (method, shape), X dynamic in M, one session per model with
intra_op_num_threads = 2 (inter_op 1, graph optimizations on). Per M: warmup runs, then timed
``session.run`` calls (host wall clock, or with --threads 1 --clock thread the calling thread's CPU
time; IO binding not used: X / Y copies are part of what a user pays) until --min-reps runs and
--budget seconds are both reached (at most --max-reps); the median is reported. Random weights,
quantized once and shared: MatMulNBits runs the very same B / scales bytes as MatMulInt4 (via
pyquant.convert.to_matmulnbits).

Methods (float32 activations):
  pyquant_int4_b{32,64,128}   pyquant::MatMulInt4, symmetric, block 32 / 64 / 128
  pyquant_int4_b{32,64,128}_a8 the same with accuracy_level=4 (int8 activations per row and block:
                              the numerics of MatMulNBits acc4, docs/ops.md "Int8 activations")
  pyquant_int4_b{..}_a8_tiles the same without the prepacked B (PYQUANT_CPU_INT8_PACK=0: the
                              lane-parallel tiles at small M; not in the default list)
  nbits_b{32,64,128}_acc0     com.microsoft::MatMulNBits, same weights, accuracy_level unset (fp32 A)
  nbits_b{32,64,128}_acc4     same with accuracy_level=4 (ORT quantizes A to int8 per block; NOT the
                              same numerics: shown because it is what ORT users pick for speed)
  pyquant_fp8                 pyquant::LinearFp8, per-channel weight scales, dynamic activation scales
                              (above M = 16 on AVX512-BF16 CPUs whose bf16 dot products outrun
                              their FP32 FMAs: the bf16 dot-product GEMM, cpu/fp8_bf16_gemm.h)
  pyquant_fp8_f32gemm         the same with that GEMM off (PYQUANT_CPU_FP8_BF16=0 while the session is
                              created): the float GEMM of cpu/blocked_gemm.h (not in the default list)
  pyquant_fp8_bf16gemm        the same with the bf16 GEMM on wherever the CPU has AVX512-BF16
                              (PYQUANT_CPU_FP8_BF16=1), whatever the default's throughput probe says
                              (cpu/fp8_bf16_gemm.h; not in the default list)
  fp32_matmul                 ONNX MatMul with a float32 [K, N] initializer (MLAS SGEMM)

The machine is shared by other jobs at times; the load average before / after is recorded and
any timing should be read with it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import pyquant  # noqa: E402
from pyquant import layout  # noqa: E402
from pyquant.convert import to_matmulnbits  # noqa: E402
from pyquant.ort import make_session  # noqa: E402
from tests.ops.graphs import fp8_model, int4_model  # noqa: E402

SHAPES = [(576, 576), (576, 1536), (2048, 2048), (4096, 4096)]  # (K, N)
M_LIST = [1, 16, 128, 512]
METHODS = [
    "pyquant_int4_b32",
    "pyquant_int4_b128",
    "pyquant_int4_b32_a8",
    "pyquant_int4_b128_a8",
    "nbits_b32_acc0",
    "nbits_b32_acc4",
    "nbits_b128_acc0",
    "nbits_b128_acc4",
    "pyquant_fp8",
    "fp32_matmul",
]


def log(*a: Any) -> None:
    print(*a, flush=True)


def _options(threads: int) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return so


def _fp32_model(w: np.ndarray) -> onnx.ModelProto:
    n, k = w.shape
    node = helper.make_node("MatMul", ["X", "W"], ["Y"], name="matmul")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
        initializer=[numpy_helper.from_array(np.ascontiguousarray(w.T), "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


@contextlib.contextmanager
def _env(knob: dict[str, str]):
    """The environment with `knob` set while sessions are created (the ops read it at kernel creation)."""
    saved = {key: os.environ.get(key) for key in knob}
    os.environ.update(knob)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def build_sessions(k: int, n: int, methods: list[str], threads: int, rng) -> dict[str, ort.InferenceSession]:
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
    out: dict[str, ort.InferenceSession] = {}
    int4: dict[int, onnx.ModelProto] = {}
    for bs in (32, 64, 128):
        if any(m.endswith(f"b{bs}") or f"_b{bs}_" in m for m in methods):
            b, s, _ = layout.quantize_int4_rtn(w, bs, symmetric=True)
            int4[bs] = int4_model(b, s, k, n, bs, x_shape=("M", None))
    for m in methods:
        if m.startswith("pyquant_int4_b") and (m.endswith("_a8") or m.endswith("_a8_tiles")):
            model = onnx.ModelProto()
            model.CopyFrom(int4[int(m.split("_b")[1].split("_")[0])])
            model.graph.node[0].attribute.append(helper.make_attribute("accuracy_level", 4))
            # _tiles: the lane-parallel tiles at small M, without the prepacked B
            with _env({"PYQUANT_CPU_INT8_PACK": "0"} if m.endswith("_tiles") else {}):
                out[m] = make_session(model.SerializeToString(), options=_options(threads))
        elif m.startswith("pyquant_int4_b"):
            out[m] = make_session(int4[int(m.split("_b")[1])].SerializeToString(), options=_options(threads))
        elif m.startswith("nbits_"):
            _, b_s, acc = m.split("_")
            model = to_matmulnbits(int4[int(b_s[1:])], accuracy_level=int(acc[3:]) or None)
            out[m] = ort.InferenceSession(
                model.SerializeToString(), _options(threads), providers=["CPUExecutionProvider"]
            )
        elif m in ("pyquant_fp8", "pyquant_fp8_f32gemm", "pyquant_fp8_bf16gemm"):
            wq, ws = layout.quantize_weight_fp8(w)
            knob = {"pyquant_fp8_f32gemm": "0", "pyquant_fp8_bf16gemm": "1"}.get(m)
            with _env({"PYQUANT_CPU_FP8_BF16": knob} if knob else {}):
                out[m] = make_session(
                    fp8_model(wq, ws, x_shape=("M", None)).SerializeToString(), options=_options(threads)
                )
        elif m == "fp32_matmul":
            out[m] = ort.InferenceSession(
                _fp32_model(w).SerializeToString(), _options(threads), providers=["CPUExecutionProvider"]
            )
        else:
            raise ValueError(f"unknown method {m}")
    return out


def time_session(
    sess, x: np.ndarray, warmup: int, min_reps: int, max_reps: int, budget: float, clock=time.perf_counter
) -> dict[str, Any]:
    """clock: time.perf_counter (wall) or time.thread_time (CPU time of this thread: with one intra-op
    thread ORT runs the kernel on the calling thread, so time the scheduler gives to other tenants of
    a shared machine is not counted; their cache and memory traffic still is)."""
    feed = {"X": x}
    for _ in range(warmup):
        sess.run(None, feed)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - start < budget):
        t0 = clock()
        sess.run(None, feed)
        times.append(clock() - t0)
    times.sort()
    return {
        "median_ms": statistics.median(times) * 1e3,
        "min_ms": times[0] * 1e3,
        "p90_ms": times[min(len(times) - 1, int(0.9 * len(times)))] * 1e3,
        "reps": len(times),
    }


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return sorted(
                        flags
                        & {
                            "avx2",
                            "fma",
                            "avx512f",
                            "avx512bw",
                            "avx512_vnni",
                            "avx512_bf16",
                            "avx_vnni",
                            "amx_int8",
                        }
                    )
    except OSError:
        pass
    return []


def git_commit() -> str:
    # PYQUANT_COMMIT (as bench_cuda.py's --commit default): the device's copy of the tree carries a
    # stale git HEAD, so the caller names the commit there.
    if os.environ.get("PYQUANT_COMMIT"):
        return os.environ["PYQUANT_COMMIT"]
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "ort_ops", "pyquant"],
            cwd=root,
            capture_output=True,
            text=True,
        )
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]], methods: list[str]) -> str:
    lines = [
        "# CPU benchmark: pyquant ops vs ORT MatMulNBits / MatMul (per layer)",
        "",
        f"* date: {meta['date']}, commit `{meta['commit']}`, onnxruntime {meta['onnxruntime']}, "
        f"pyquant library `{meta['library']}`",
        f"* CPU: {meta['cpu']} ({meta['cores']} cores visible; flags {', '.join(meta['cpu_flags'])}), "
        f"intra_op_num_threads = {meta['threads']}, clock {meta.get('clock', 'wall')}",
        f"* load average before / after: {meta['loadavg_before']} / {meta['loadavg_after']} "
        "(the machine was shared; read timings with that in mind)",
        f"* command: `{meta['command']}`",
        f"* median of >= {meta['min_reps']} runs after {meta['warmup']} warmup runs (up to "
        f"{meta['budget_s']} s per point); times in ms per layer, float32 activations. `acc4` = "
        "accuracy_level 4 (int8 activations, different numerics).",
        "",
    ]
    for k, n in sorted({(r["K"], r["N"]) for r in rows}, key=lambda s: s[0] * s[1]):
        lines += [
            f"## K x N = {k} x {n}",
            "",
            "| M | " + " | ".join(methods) + " | int4_b32 / nbits_b32_acc0 |",
        ]
        lines.append("|---:|" + "---:|" * (len(methods) + 1))
        for m in sorted({r["M"] for r in rows}):
            cell = {r["method"]: r for r in rows if (r["K"], r["N"], r["M"]) == (k, n, m)}
            vals = [f"{cell[x]['median_ms']:.3f}" if x in cell else "-" for x in methods]
            ratio = "-"
            if "pyquant_int4_b32" in cell and "nbits_b32_acc0" in cell:
                ratio = f"{cell['pyquant_int4_b32']['median_ms'] / cell['nbits_b32_acc0']['median_ms']:.2f}x"
            lines.append(f"| {m} | " + " | ".join(vals) + f" | {ratio} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="folder for <date>-cpu-ops.json / .md (default: print only)")
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--shapes", default=",".join(f"{k}x{n}" for k, n in SHAPES), help="KxN,KxN,...")
    ap.add_argument("--m", default=",".join(map(str, M_LIST)))
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--min-reps", type=int, default=5)
    ap.add_argument("--max-reps", type=int, default=200)
    ap.add_argument(
        "--budget", type=float, default=0.4, help="seconds of timed runs per point (after min-reps)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--clock",
        choices=["wall", "thread"],
        default="wall",
        help="thread: CPU time of the calling thread (needs --threads 1), for A / B runs on a loaded host",
    )
    args = ap.parse_args(argv)
    if args.clock == "thread" and args.threads != 1:
        ap.error("--clock thread measures the calling thread only: use it with --threads 1")
    clock = time.thread_time if args.clock == "thread" else time.perf_counter

    methods = [m for m in args.methods.split(",") if m]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
    m_list = [int(v) for v in args.m.split(",") if v]
    rng = np.random.default_rng(args.seed)
    meta: dict[str, Any] = {
        "date": args.date,
        "commit": git_commit(),
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cores": os.cpu_count(),
        "onnxruntime": ort.__version__,
        "pyquant": pyquant.__version__,
        "library": pyquant.get_library_path(),
        "threads": args.threads,
        "clock": args.clock,
        "warmup": args.warmup,
        "min_reps": args.min_reps,
        "budget_s": args.budget,
        "command": "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__)] + sys.argv[1:]),
        "loadavg_before": [round(v, 2) for v in os.getloadavg()],
    }
    log(json.dumps(meta))
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for k, n in shapes:
        sessions = build_sessions(k, n, methods, args.threads, rng)
        for m in m_list:
            x = rng.standard_normal((m, k)).astype(np.float32)
            for name in methods:
                r = time_session(
                    sessions[name], x, args.warmup, args.min_reps, args.max_reps, args.budget, clock
                )
                flops = 2.0 * m * k * n
                row = {"method": name, "K": k, "N": n, "M": m, **r, "gflops": flops / (r["median_ms"] * 1e6)}
                rows.append(row)
                log(f"K={k:5d} N={n:5d} M={m:4d} {name:18s} {r['median_ms']:9.3f} ms  ({r['reps']} reps)")
        del sessions
    meta["loadavg_after"] = [round(v, 2) for v in os.getloadavg()]
    meta["wall_s"] = round(time.perf_counter() - t_start, 1)
    md = markdown(meta, rows, methods)
    log(md)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        base = os.path.join(args.out, f"{args.date}-cpu-ops")
        with open(base + ".json", "w") as f:
            json.dump({"meta": meta, "results": rows}, f, indent=1)
        with open(base + ".md", "w") as f:
            f.write(md + "\n")
        log(f"wrote {base}.json and {base}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
