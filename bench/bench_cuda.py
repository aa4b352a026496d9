"""GPU benchmark of pyquant's CUDA ops against ORT's own kernels and torch, in one process.

    python bench/bench_cuda.py --out bench/results --tag h100

Per (shape, method) one ONNX model (or torch CUDA graph) holding L layers with distinct weights
(so no layer hits another's weights in L2) that all read the same activation X ("fan-out": the
shapes are not square, so the layers cannot chain). Each M gets its own ORT CUDA graph
(enable_cuda_graph + gpu_graph_id), inputs / outputs bound once through IOBinding to torch
buffers; runs are queued without host synchronisation (disable_synchronize_execution_providers)
and timed on the host clock from a device synchronisation to the one after R runs: time per
layer = span / (R * L). All methods of a shape are prepared first (sessions, graphs for every M);
then per M each method's batch of R runs is timed once per round, right after an untimed quarter
batch of itself, the methods in a random order each round (--rounds, default 7), and the median
is reported: ratios between methods are not biased by the order they ran in or by the power
state the previous method left (time_interleaved; --sequential: each method alone, 5 batches,
the layout before 2026-11-23).

Methods (fp16 activations): bench_cuda_methods.py lists them (METHODS, the default list, and
the environment-switch variants of METHOD_ENV).

HBM floor = (weights + scales + X + Y bytes, each once) / copy bandwidth measured in this run
(a large device-to-device copy, bytes read + written).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cuda_methods import METHOD_ENV, METHODS  # noqa: E402

SHAPES = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192)]  # (K, N)
M_LIST = [1, 4, 16, 64, 256, 1024, 4096]
BLOCK = 128


def log(*a):
    print(*a, flush=True)


# ----------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------


def _graph(nodes, inits, k, n_out, layers, extra_inputs=()):
    from onnx import TensorProto, helper

    outs = [helper.make_tensor_value_info(f"Y{i}", TensorProto.FLOAT16, ["M", n_out]) for i in range(layers)]
    g = helper.make_graph(
        nodes,
        "bench",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT16, ["M", k]), *extra_inputs],
        outs,
        initializer=inits,
    )
    opsets = [
        helper.make_opsetid("", 21),
        helper.make_opsetid("pyquant", 1),
        helper.make_opsetid("com.microsoft", 1),
    ]
    m = helper.make_model(g, opset_imports=opsets, ir_version=10)
    return m.SerializeToString()


def _int4_weights(rng, k, n):
    nb = (k + BLOCK - 1) // BLOCK
    b = rng.integers(0, 256, size=(n, nb, BLOCK // 2), dtype=np.uint8)
    scales = (rng.random((n, nb), dtype=np.float32) * 0.02 + 0.001).astype(np.float16)
    return b, scales


def build_model(method, rng, k, n, layers):
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    for i in range(layers):
        if method.startswith("pyquant_int4") or method == "ort_matmulnbits":
            b, s = _int4_weights(rng, k, n)
            inits.append(numpy_helper.from_array(b, f"B{i}"))
            if method.startswith("pyquant_int4"):
                inits.append(numpy_helper.from_array(s, f"S{i}"))
                nodes.append(
                    helper.make_node(
                        "MatMulInt4",
                        ["X", f"B{i}", f"S{i}"],
                        [f"Y{i}"],
                        domain="pyquant",
                        K=k,
                        N=n,
                        block_size=BLOCK,
                    )
                )
            else:
                inits.append(numpy_helper.from_array(s.reshape(-1), f"S{i}"))
                nodes.append(
                    helper.make_node(
                        "MatMulNBits",
                        ["X", f"B{i}", f"S{i}"],
                        [f"Y{i}"],
                        domain="com.microsoft",
                        K=k,
                        N=n,
                        bits=4,
                        block_size=BLOCK,
                    )
                )
        elif method == "ort_matmul_fp16":
            w = rng.integers(-1024, 1024, size=(k, n), dtype=np.int16).astype(np.float16) * np.float16(1e-3)
            inits.append(numpy_helper.from_array(w, f"W{i}"))
            nodes.append(helper.make_node("MatMul", ["X", f"W{i}"], [f"Y{i}"]))
        elif method.startswith("pyquant_fp8"):
            # random e4m3 bytes without NaN (0x7F / 0xFF)
            w = rng.integers(0, 256, size=(n, k), dtype=np.uint8)
            w[(w & 0x7F) == 0x7F] = 0x3C
            inits.append(helper.make_tensor(f"W{i}", TensorProto.FLOAT8E4M3FN, [n, k], w.tobytes(), raw=True))
            inits.append(numpy_helper.from_array((rng.random(n, dtype=np.float32) * 0.01 + 1e-3), f"S{i}"))
            # pyquant_fp8wo: weight-only FP8 (weight_only=1: X not quantized)
            attrs = {"weight_only": 1} if method.startswith("pyquant_fp8wo") else {}
            nodes.append(
                helper.make_node("LinearFp8", ["X", f"W{i}", f"S{i}"], [f"Y{i}"], domain="pyquant", **attrs)
            )
        else:
            raise ValueError(method)
    return _graph(nodes, inits, k, n, layers)


def weight_bytes(method, k, n):
    nb = (k + BLOCK - 1) // BLOCK
    if method.startswith("pyquant_int4") or method == "ort_matmulnbits":
        return n * nb * BLOCK // 2 + n * nb * 2
    if method in ("ort_matmul_fp16", "torch_fp16"):
        return n * k * 2
    if method.startswith("pyquant_fp8") or method == "torch_scaled_mm_q":
        return n * k + n * 4
    if method == "torch_scaled_mm":
        return n * k
    raise ValueError(method)


def act_bytes(method, m, k, n):
    x = m * k * (1 if method == "torch_scaled_mm" else 2)
    return x + m * n * 2


# ----------------------------------------------------------------------------------------------
# timing
# ----------------------------------------------------------------------------------------------


def time_stream(fn, reps, repeats=5):
    """Median over `repeats` of the wall time of `reps` queued calls of fn followed by one device
    synchronisation, in seconds. (ORT runs on its own stream, so device-wide synchronisation
    rather than stream events; with CUDA graphs and no per-run sync the host stays ahead of the
    GPU as long as one run's GPU work exceeds its launch cost, which the layer count ensures.)"""
    import torch

    spans = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        spans.append(time.perf_counter() - t0)
    return statistics.median(spans), spans


def time_interleaved(runners, rounds, seed=0, debug_sync=False, label=""):
    """runners: {method: {"fn", "reps"}} of one shape and M. Times one batch of `reps` calls per
    method per round, the methods in a fresh random order each round, each batch right after an
    untimed quarter batch of the same method, and returns {method: (median seconds per batch,
    spans)}. Why: the GPU's clocks follow its power draw with a delay, so a batch timed right
    after a power-hungry method (an fp16 GEMM) runs slower; with a fixed (even rotated) order a
    method always follows the same neighbour (2026-11-23: an identical copy of the default INT4
    method measured 10-20 % apart at M = 256 that way). The warm-up lets every method time its
    own steady state, and the random order spreads what is left evenly. debug_sync: in the first
    round, log each method before its batch and synchronise after its warm-up, so that a device
    fault names the method that raised it."""
    import random

    import torch

    names = list(runners)
    spans = {name: [] for name in names}
    order_rng = random.Random(seed)
    for rnd in range(rounds):
        order = names[:]
        order_rng.shuffle(order)
        for name in order:
            fn, reps = runners[name]["fn"], runners[name]["reps"]
            if debug_sync and rnd == 0:
                log(f"  debug-sync {label} {name}: first replay")
                fn()
                torch.cuda.synchronize()
            for _ in range(max(1, reps // 4)):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
            spans[name].append(time.perf_counter() - t0)
    return {name: (statistics.median(v), v) for name, v in spans.items()}


def copy_bandwidth():
    import torch

    n = 1 << 30  # 1 GiB
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    a.random_(0, 255)
    for _ in range(3):
        b.copy_(a)
    t, _ = time_stream(lambda: b.copy_(a), 10)
    return 2 * n * 10 / t


def reps_for(seconds_per_call):
    return int(min(200, max(3, 0.05 / max(seconds_per_call, 1e-7))))


def bench_ort(method, model_bytes, k, n, layers, m_list, use_graph=True, prepare_only=False):
    """Times `method` per M, or with prepare_only returns {M: runner} (runner: fn, reps, check;
    the closures keep the session and buffers alive) for interleaved timing (time_interleaved)."""
    import onnxruntime as ort
    import torch
    from onnx import TensorProto

    from pyquant.ort import session_options

    opts = {"device_id": "0"}
    if use_graph:
        opts["enable_cuda_graph"] = "1"
    env = METHOD_ENV.get(method, {})
    if "PYQUANT_LIBRARY" in env and not env["PYQUANT_LIBRARY"]:
        raise SystemExit(f"{method}: set PYQUANT_ALT_LIBRARY to the other build's libpyquant_ops.so")
    os.environ.update(env)  # read at kernel creation (PYQUANT_LIBRARY: by session_options)
    try:
        so = session_options()
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        so.log_severity_level = 3
        sess = ort.InferenceSession(model_bytes, sess_options=so, providers=[("CUDAExecutionProvider", opts)])
    finally:
        for key in env:
            os.environ.pop(key, None)
    results = {}
    for gid, m in enumerate(m_list, start=1):
        x = (torch.randn(m, k, device="cuda") * 0.5).half()
        ys = [torch.empty(m, n, dtype=torch.float16, device="cuda") for _ in range(layers)]
        io = sess.io_binding()
        io.bind_input("X", "cuda", 0, TensorProto.FLOAT16, [m, k], x.data_ptr())
        for i, y in enumerate(ys):
            io.bind_output(f"Y{i}", "cuda", 0, TensorProto.FLOAT16, [m, n], y.data_ptr())
        torch.cuda.synchronize()  # ORT's stream does not wait for torch's
        ro = ort.RunOptions()
        ro.add_run_config_entry("disable_synchronize_execution_providers", "1")
        if use_graph:
            ro.add_run_config_entry("gpu_graph_id", str(gid))
        for _ in range(3):  # warm-up + graph capture
            sess.run_with_iobinding(io, ro)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        sess.run_with_iobinding(io, ro)
        torch.cuda.synchronize()
        reps = reps_for(time.perf_counter() - t1)

        def run(io=io, ro=ro):
            sess.run_with_iobinding(io, ro)

        def check(ys=ys, m=m):
            torch.cuda.synchronize()
            assert torch.isfinite(ys[-1]).all().item(), f"{method} M={m}: non-finite output"

        if prepare_only:
            results[m] = {"fn": run, "reps": reps, "check": check, "keep": (sess, x, ys, io, ro)}
            continue
        t, spans = time_stream(run, reps)
        results[m] = {"s_per_layer": t / (reps * layers), "reps": reps, "spans_s": spans}
        check()
    return results


def bench_torch(method, rng, k, n, layers, m_list, prepare_only=False):
    """As bench_ort, for the torch methods (CUDA graphs)."""
    import torch

    ws = []
    for _ in range(layers):
        if method == "torch_fp16":
            ws.append((torch.randn(n, k, device="cuda") * 0.02).half())
        else:
            ws.append((torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn))
    one = torch.ones((), device="cuda")
    results = {}
    for m in m_list:
        note = None
        mm = m
        if method == "torch_scaled_mm" and m % 16:
            mm = (m + 15) // 16 * 16  # _scaled_mm needs M % 16 == 0
            note = f"M padded to {mm}"
        if method == "torch_fp16":
            x = (torch.randn(mm, k, device="cuda") * 0.5).half()

            def fn(x=x):
                for w in ws:
                    torch.nn.functional.linear(x, w)
        elif method == "torch_scaled_mm_q":
            x = (torch.randn(m, k, device="cuda") * 0.5).half()
            s_w = [torch.rand(1, n, device="cuda") * 0.01 + 1e-3 for _ in ws]

            def fn(x=x, s_w=s_w):
                for w, sw in zip(ws, s_w, strict=True):
                    # per-token quantization as docs/ops.md (dynamic), once per layer as each
                    # LinearFp8 node does: amax, scale, saturating cast
                    xf = x.float()
                    amax = xf.abs().amax(dim=1, keepdim=True)
                    s_x = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
                    xq = (xf / s_x).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
                    torch._scaled_mm(xq, w.t(), scale_a=s_x, scale_b=sw, out_dtype=torch.bfloat16)
        else:
            x = (torch.randn(mm, k, device="cuda")).to(torch.float8_e4m3fn)

            def fn(x=x):
                for w in ws:
                    torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.float16)

        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                fn()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            g.replay()
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            g.replay()
            torch.cuda.synchronize()
            reps = reps_for(time.perf_counter() - t1)
            if prepare_only:
                # keep fn: its defaults / closure hold tensors the graph reads (s_w, `one`); a captured
                # graph does not keep them alive, and their memory would go back to the allocator
                results[m] = {"fn": g.replay, "reps": reps, "check": lambda: None, "keep": (g, x, ws, fn)}
                if note:
                    results[m]["note"] = note
                continue
            t, spans = time_stream(g.replay, reps)
            results[m] = {"s_per_layer": t / (reps * layers), "reps": reps, "spans_s": spans}
            if note:
                results[m]["note"] = note
        except Exception as e:  # noqa: BLE001
            results[m] = {"error": f"{type(e).__name__}: {e}"[:300]}
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--tag", default="gpu")
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--shapes", default=",".join(f"{k}x{n}" for k, n in SHAPES))
    ap.add_argument("--m", default=",".join(map(str, M_LIST)))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument(
        "--layers", type=int, default=16, help="layers per model (fewer where fp16 weights pass 1.5 GB)"
    )
    ap.add_argument("--commit", default=os.environ.get("PYQUANT_COMMIT", "unknown"))
    ap.add_argument(
        "--sequential",
        action="store_true",
        help="time each method alone, one after the other (the layout before 2026-11-23); default: "
        "all methods of a shape prepared first, then timed in interleaved rounds per M",
    )
    ap.add_argument(
        "--rounds", type=int, default=7, help="interleaved rounds (timed batches) per method and M"
    )
    ap.add_argument(
        "--no-plot",
        action="store_true",
        help="write the JSON and markdown only (the device tool returns at most 8 files a call: "
        "several runs in one call fit without their plots; bench/plot_cuda.py draws them later)",
    )
    ap.add_argument(
        "--debug-sync",
        action="store_true",
        help="log GPU memory after each method is prepared, and synchronise after each method's "
        "first replay of the first round (names the method behind a device fault)",
    )
    args = ap.parse_args()

    import onnxruntime as ort
    import torch

    import pyquant

    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    m_list = [int(v) for v in args.m.split(",")]
    methods = args.methods.split(",")
    dev = torch.cuda.get_device_name()
    bw = copy_bandwidth()
    log(f"device {dev}; copy bandwidth {bw / 1e12:.2f} TB/s (read + write)")
    rng = np.random.default_rng(0)
    rows = []
    meta = {
        "date": args.date,
        "device": dev,
        "commit": args.commit,
        "command": " ".join(["python"] + sys.argv),
        "copy_bandwidth_TBps": bw / 1e12,
        "onnxruntime": ort.__version__,
        "torch": torch.__version__,
        "pyquant_build": pyquant.build_info(),
        # the *_alt methods' library (another build) and the commit it was built from
        "alt_library": os.environ.get("PYQUANT_ALT_LIBRARY"),
        "alt_commit": os.environ.get("PYQUANT_ALT_COMMIT"),
        "block_size": BLOCK,
        "pyquant_cuda_kernels": os.environ.get("PYQUANT_CUDA_KERNELS", "fast"),
        "timed_batches": 5 if args.sequential else args.rounds,
        "timing": "methods timed one after the other"
        if args.sequential
        else "methods interleaved: per round one batch of each after a quarter batch of itself, random order",
    }
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"{args.date}-{args.tag}-bench-cuda")

    def save():  # after every (shape, method): a partial file survives a time-out
        with open(base + ".json", "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        with open(base + ".md", "w") as f:
            f.write(markdown(meta, rows, m_list, methods))

    for k, n in shapes:
        layers = args.layers
        if layers * n * k * 2 > 1.5e9:
            layers = max(8, int(1.5e9 // (n * k * 2)))

        def measure(method, prepare_only, k=k, n=n, layers=layers):
            """(results per M, mode) of one method; with prepare_only the results are runners."""
            try:
                if method.startswith("torch"):
                    return bench_torch(method, rng, k, n, layers, m_list, prepare_only), "torch CUDA graph"
                model = build_model(method, rng, k, n, layers)
                try:
                    return bench_ort(
                        method, model, k, n, layers, m_list, True, prepare_only
                    ), "ORT CUDA graph"
                except Exception as e:  # noqa: BLE001
                    log(
                        f"  {method}: CUDA graph failed ({type(e).__name__}: {str(e)[:200]}); plain IOBinding"
                    )
                    res = bench_ort(method, model, k, n, layers, m_list, False, prepare_only)
                    return res, "ORT IOBinding, no graph"
            except Exception as e:  # noqa: BLE001
                log(f"  {method} {k}x{n}: FAILED {type(e).__name__}: {str(e)[:300]}")
                return {m: {"error": f"{type(e).__name__}: {e}"[:300]} for m in m_list}, "failed"

        def add_rows(method, res, mode, t0, k=k, n=n, layers=layers):
            for m in m_list:
                r = res.get(m, {"error": "missing"})
                row = {"K": k, "N": n, "M": m, "method": method, "layers": layers, "mode": mode}
                if "s_per_layer" in r:
                    t = r["s_per_layer"]
                    byts = weight_bytes(method, k, n) + act_bytes(method, m, k, n)
                    floor = byts / bw
                    row.update(
                        us=t * 1e6,
                        bytes=byts,
                        floor_us=floor * 1e6,
                        pct_floor=100 * floor / t,
                        tflops=2 * m * n * k / t / 1e12,
                        reps=r["reps"],
                        spans_us=[s * 1e6 for s in r["spans_s"]],
                    )
                    if "note" in r:
                        row["note"] = r["note"]
                else:
                    row["error"] = r["error"]
                rows.append(row)
            log(
                f"{k}x{n} {method:16s} [{mode}] "
                + " ".join(
                    f"M{r['M']}:{r['us']:.1f}" if "us" in r else f"M{r['M']}:ERR"
                    for r in rows[-len(m_list) :]
                )
                + f"  ({time.time() - t0:.0f} s)"
            )

        if args.sequential:
            for method in methods:
                t0 = time.time()
                res, mode = measure(method, prepare_only=False)
                torch.cuda.empty_cache()
                add_rows(method, res, mode, t0)
                save()
            continue
        # interleaved: every method's sessions and graphs first, then per M rounds over all of them
        t0 = time.time()
        prepared = {}
        for method in methods:
            prepared[method] = measure(method, prepare_only=True)
            if args.debug_sync:
                torch.cuda.synchronize()
                free_b, total_b = torch.cuda.mem_get_info()
                used_gib = (total_b - free_b) / 2**30
                log(f"  debug-sync {k}x{n} {method} prepared; GPU memory used {used_gib:.1f} GiB")
        # GPU memory with every method's sessions and graphs alive (session 25: a 16-layer run of six
        # methods died with an illegal address at its first timed round, an 8-layer one did not)
        free_b, total_b = torch.cuda.mem_get_info()
        used_gib, total_gib = (total_b - free_b) / 2**30, total_b / 2**30
        log(f"{k}x{n}: {len(prepared)} methods ready; GPU memory used {used_gib:.1f} of {total_gib:.1f} GiB")
        results = {method: {} for method in methods}
        for m in m_list:
            runners = {meth: res[m] for meth, (res, _) in prepared.items() if "fn" in res.get(m, {})}
            timed = time_interleaved(runners, args.rounds, debug_sync=args.debug_sync, label=f"{k}x{n} M={m}")
            for meth, (res, _) in prepared.items():
                r = res.get(m, {"error": "missing"})
                if meth in timed:
                    t, spans = timed[meth]
                    r["check"]()
                    results[meth][m] = {
                        "s_per_layer": t / (r["reps"] * layers),
                        "reps": r["reps"],
                        "spans_s": spans,
                    }
                    if "note" in r:
                        results[meth][m]["note"] = r["note"]
                else:
                    results[meth][m] = {"error": r.get("error", "missing")}
        for method in methods:
            add_rows(method, results[method], prepared[method][1], t0)
        del prepared, results
        torch.cuda.empty_cache()
        save()
    save()
    log(markdown(meta, rows, m_list, methods))
    if args.no_plot:
        log(f"no plot (--no-plot): python bench/plot_cuda.py {base}.json")
        return
    try:  # the plot (bench/plot_cuda.py) where matplotlib is installed; else run that script later
        from plot_cuda import NoBaselineError, plot

        log(f"plot: {plot(Path(base + '.json'))}")
    except ImportError as e:
        log(f"no plot here ({e}): python bench/plot_cuda.py {base}.json")
    except NoBaselineError as e:  # a run without torch_fp16: its tables are written, no plot
        log(f"no plot: {e}")


def markdown(meta, rows, m_list, methods):
    out = [
        f"# CUDA benchmark, {meta['date']}, {meta['device']}",
        "",
        f"commit `{meta['commit']}`; onnxruntime {meta['onnxruntime']}, torch {meta['torch']}; "
        f"copy bandwidth {meta['copy_bandwidth_TBps']:.2f} TB/s (read + write). Command: `{meta['command']}`",
        "",
        *(
            [f"`*_alt` methods: the library `{meta['alt_library']}`, commit `{meta.get('alt_commit')}`.", ""]
            if any(m.endswith("_alt") for m in methods) and meta.get("alt_library")
            else []
        ),
        f"µs per layer (median of {meta.get('timed_batches', 5)} timed batches of R CUDA-graph replays, "
        f"synchronised at both ends; {meta.get('timing', 'methods timed one after the other')}; "
        "each model holds L layers "
        "with distinct weights reading one X); in brackets: % of the HBM floor (weights + X + Y bytes once "
        "/ copy bandwidth). int4: block 128, symmetric, fp16 activations.",
        "",
    ]
    by = {(r["K"], r["N"], r["M"], r["method"]): r for r in rows}
    shapes = sorted(
        {(r["K"], r["N"]) for r in rows},
        key=lambda s: [tuple(x) for x in SHAPES].index(s) if s in SHAPES else 99,
    )
    for k, n in shapes:
        out.append(f"## K={k}, N={n}")
        out.append("")
        out.append(
            "| M | "
            + " | ".join(methods)
            + " | int4 vs MatMulNBits | int4 vs fp16 MatMul | fp8 vs torch fp16 | fp8 vs scaled_mm_q"
            + " | fp8 TFLOP/s |"
        )
        out.append("|---" * (len(methods) + 6) + "|")
        for m in m_list:
            cells = []
            for meth in methods:
                r = by.get((k, n, m, meth))
                if r is None or "us" not in r:
                    cells.append("err" if r is not None else "")
                else:
                    cells.append(f"{r['us']:.1f} ({r['pct_floor']:.0f}%)" + ("*" if "note" in r else ""))

            def sp(a, b, k=k, n=n, m=m):
                ra, rb = by.get((k, n, m, a)), by.get((k, n, m, b))
                if ra and rb and "us" in ra and "us" in rb:
                    return f"{rb['us'] / ra['us']:.2f}x"
                return ""

            def tf(a, k=k, n=n, m=m):
                r = by.get((k, n, m, a))
                return f"{r['tflops']:.0f}" if r and "tflops" in r else ""

            out.append(
                f"| {m} | " + " | ".join(cells) + f" | {sp('pyquant_int4', 'ort_matmulnbits')} | "
                f"{sp('pyquant_int4', 'ort_matmul_fp16')} | {sp('pyquant_fp8', 'torch_fp16')} | "
                f"{sp('pyquant_fp8', 'torch_scaled_mm_q')} | {tf('pyquant_fp8')} |"
            )
        out.append("")
    out.append(
        "Speedups are time(other) / time(ours): > 1 means ours is faster. `*`: torch._scaled_mm needs "
        "M % 16 == 0, M padded up. torch_scaled_mm times the GEMM alone on pre-quantized X; "
        "pyquant_fp8 includes its activation-quantization kernel."
    )
    errs = [r for r in rows if "error" in r]
    if errs:
        out.append("")
        out.append(
            "Errors: "
            + "; ".join(f"{r['method']} {r['K']}x{r['N']} M={r['M']}: {r['error'][:120]}" for r in errs[:12])
        )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
