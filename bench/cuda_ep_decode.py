"""Whole-model generation on ONNX Runtime's CUDA EP with the KV cache: float16 against pyquant's
INT4 / FP8 / weight-only FP8, same model, same run.

    python bench/cuda_ep_decode.py --out bench/results --tag h100-sNN --commit <hash> \\
        [--shape llama8b-4l,smollm2] [--schemes float16,int4-b128,fp8,fp8-wo] [--batch 1,8] \
        [--cache growing,static-graph]

Per shape (below; random weights: this measures speed, not accuracy) the script builds a
transformers LlamaForCausalLM, quantizes every decoder linear with each scheme (round to nearest;
lm_head and the embedding stay float16), exports it in float16 with pyquant.export_causal_lm and
times greedy generation through pyquant.ort.generate(device="cuda") (the cache stays on the GPU;
growing cache: each step binds the inputs, runs, copies the last position's logits to the host and
takes the argmax there, as a Python serving loop does; static caches: the graph's own argmax
output, ``next_tokens``, feeds the next step on the device and only the tokens come back).
Reported per batch size: the prompt step (prefill of --prompt tokens) and the mean time per
decoded token, from generate(1) and generate(1 + --tokens) (median of --repeats), plus torch fp16
eager (transformers' generate with its DynamicCache) as a reference.

--cache picks the exported cache (pyquant/generation.py): ``growing`` (the past grows every step,
so decode steps cannot be CUDA-graph captured and ORT's per-node launch cost is part of every
figure: on small models it dominates), ``static`` (fixed-length buffers written at a slot, no
graphs) and ``static-graph`` (the same on a session with ``enable_cuda_graph``: decode steps replay
two captured CUDA graphs; the prompt step runs outside them). Static caches are as long as the
longest call (prompt + 1 + tokens, at least prompt + 4) in every call, so later calls replay the
first call's graphs.

On the CPU EP (``--provider cpu --dtype float32 --schemes float32,...``) the same measurement
runs in float32 (ORT's CPU EP has no float16 kernels for most ops).

Shapes: llama8b-4l: Llama-3-8B's layer (hidden 4096, FFN 14336, 32 heads, 8 KV heads), 4 layers,
vocab 32000; smollm2: SmolLM2-135M's (576, 1536, 9 / 3 heads, 30 layers, vocab 49152).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES: dict[str, dict[str, int]] = {
    "llama8b-4l": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_attention_heads=32,
        num_key_value_heads=8,
        num_hidden_layers=4,
        vocab_size=32000,
    ),
    "tiny": dict(  # a smoke test of the script (--provider cpu)
        hidden_size=128,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=512,
    ),
    "smollm2": dict(
        hidden_size=576,
        intermediate_size=1536,
        num_attention_heads=9,
        num_key_value_heads=3,
        num_hidden_layers=30,
        vocab_size=49152,
    ),
}


def _model(shape: str) -> Any:
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(max_position_embeddings=4096, tie_word_embeddings=False, **SHAPES[shape])
    with torch.device("cpu"):
        model = transformers.LlamaForCausalLM(cfg).eval()
    return model


def _quantized(model: Any, scheme: str, half: bool) -> Any:
    import copy

    import pyquant
    from pyquant.models.recipes import parse_scheme

    m = copy.deepcopy(model)
    if scheme not in ("float16", "float32", "float"):
        cfg = pyquant.QuantizeConfig(default=parse_scheme(scheme), exclude=("lm_head",))
        pyquant.quantize(m, cfg)
    return m.half() if half else m


def _timed(fn: Any, repeats: int) -> tuple[float, Any]:
    """Median seconds of `repeats` calls of fn, and the last call's result."""
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)), out


def _prompt_ids(batch: int, prompt: int, vocab: int) -> np.ndarray:
    """The same random prompts for every method at one batch size."""
    return np.random.default_rng(batch).integers(5, vocab, (batch, prompt))


def _session(path: Path, provider: str, cache: str, options: Any = None) -> Any:
    """A pyquant session on ``provider``; with CUDA graphs for the ``static-graph`` cache."""
    import pyquant.ort

    graphs = {"enable_cuda_graph": "1"} if cache == "static-graph" else None
    return pyquant.ort.make_session(
        path, providers=((provider, graphs) if graphs else provider,), options=options, strict=True
    )


def _ort_case(
    path: Path,
    provider: str,
    batch: int,
    prompt: int,
    tokens: int,
    repeats: int,
    vocab: int,
    cache: str,
    cache_length: int | None = None,
) -> dict:
    import pyquant.ort

    sess = _session(path, provider, cache)
    ids = _prompt_ids(batch, prompt, vocab)
    kw = {"cache_length": cache_length or prompt + max(4, 1 + tokens)} if cache != "growing" else {}

    def gen(n: int) -> Any:
        return pyquant.ort.generate(sess, ids, n, device=provider, **kw)

    gen(4)  # warm-up (kernel creation, arena growth; with graphs: both decode graphs captured)
    one, _ = _timed(lambda: gen(1), repeats)
    full, out = _timed(lambda: gen(1 + tokens), repeats)
    return {
        "prefill_ms": one * 1e3,
        "decode_ms_per_token": (full - one) / tokens * 1e3,
        "tokens": out.tolist(),
    }


def _profile(path: Path, provider: str, batch: int, prompt: int, vocab: int, tmp: str, cache: str) -> dict:
    """ORT's node profile of generate(1 + 4) after two warm-up runs: per op type (and provider) the
    summed host time of the nodes' Compute calls over the prompt step and 4 decode steps, µs,
    largest first (CUDA kernels run asynchronously: this is launch cost, not GPU time)."""
    import onnxruntime as ort

    import pyquant.ort

    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(Path(tmp) / "prof")
    sess = _session(path, provider, cache, so)
    ids = _prompt_ids(batch, prompt, vocab)
    kw = {"cache_length": prompt + 5} if cache != "growing" else {}
    pyquant.ort.generate(sess, ids, 2, device=provider, **kw)  # first runs: one-time preparation, not counted
    pyquant.ort.generate(sess, ids, 5, device=provider, **kw)
    events = json.loads(Path(sess.end_profiling()).read_text())
    kernels = sorted(
        (ev for ev in events if ev.get("cat") == "Node" and ev.get("name", "").endswith("_kernel_time")),
        key=lambda ev: ev.get("ts", 0),
    )
    per_run = len({ev["name"] for ev in kernels})  # every run executes each node once
    per_op: dict[str, float] = {}
    for ev in kernels[2 * per_run :]:
        a = ev.get("args", {})
        if "op_name" in a:
            key = f"{a['op_name']}@{a.get('provider', '?').replace('ExecutionProvider', '')}"
            per_op[key] = per_op.get(key, 0.0) + float(ev.get("dur", 0))
    return dict(sorted(per_op.items(), key=lambda kv: -kv[1])[:12])


def _kernel_profile(
    path: Path, provider: str, batch: int, prompt: int, vocab: int, cache: str, tokens: int = 4
) -> dict:
    """GPU time per CUDA kernel (CUPTI, through torch.profiler, which sees every kernel of the
    process, ORT's included, also inside CUDA graphs), after a warm-up: generate(1) (the prompt
    step) and generate(1 + tokens) profiled apart, so a kernel's decode time per step is the
    difference over `tokens`. The largest 15 of each, µs, and the totals."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import pyquant.ort

    sess = _session(path, provider, cache)
    ids = _prompt_ids(batch, prompt, vocab)
    kw = {"cache_length": prompt + 1 + tokens} if cache != "growing" else {}

    def per_kernel(n: int) -> dict[str, float]:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            pyquant.ort.generate(sess, ids, n, device=provider, **kw)
            torch.cuda.synchronize()
        return {
            e.key[:90]: float(getattr(e, "device_time_total", 0.0) or getattr(e, "cuda_time_total", 0.0))
            for e in prof.key_averages()
        }

    pyquant.ort.generate(sess, ids, 1 + tokens, device=provider, **kw)
    pyquant.ort.generate(sess, ids, 1 + tokens, device=provider, **kw)
    prompt_step = per_kernel(1)
    whole = per_kernel(1 + tokens)
    decode = {k: (v - prompt_step.get(k, 0.0)) / tokens for k, v in whole.items()}

    def top(d: dict[str, float]) -> dict[str, float]:
        return dict(sorted(d.items(), key=lambda kv: -kv[1])[:15])

    return {
        "total_us": sum(whole.values()),
        "top_us": top(whole),
        "prompt_step_total_us": sum(prompt_step.values()),
        "decode_step_total_us": sum(decode.values()),
        "decode_step_top_us": top(decode),
    }


def _torch_case(model: Any, batch: int, prompt: int, tokens: int, repeats: int, vocab: int) -> dict:
    import torch

    m = model.half().cuda()
    ids = torch.as_tensor(_prompt_ids(batch, prompt, vocab)).cuda()

    def gen(n: int) -> None:
        with torch.no_grad():
            m.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                pad_token_id=0,
            )
        torch.cuda.synchronize()

    gen(3)
    one, _ = _timed(lambda: gen(1), repeats)
    full, _ = _timed(lambda: gen(1 + tokens), repeats)
    m.cpu()
    torch.cuda.empty_cache()
    return {"prefill_ms": one * 1e3, "decode_ms_per_token": (full - one) / tokens * 1e3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for <date>-<tag>-cuda-ep-decode.{json,md}")
    ap.add_argument("--tag", required=True)
    ap.add_argument("--commit", default="?")
    ap.add_argument("--shape", default="llama8b-4l,smollm2")
    ap.add_argument("--schemes", default="float16,int4-b128,int4-b64-asym,fp8,fp8-wo")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument(
        "--cache-length",
        type=int,
        default=None,
        help="static caches: the buffers' length (default prompt + 1 + tokens, at least prompt + 4)",
    )
    ap.add_argument(
        "--cache",
        default="growing,static-graph",
        help="exported caches to time: growing, static, static-graph (comma-separated)",
    )
    ap.add_argument(
        "--dtype",
        default="float16",
        choices=("float16", "float32"),
        help="float32 for the CPU EP (no fp16 kernels)",
    )
    ap.add_argument("--profile", action="store_true", help="also ORT's per-op kernel time (first batch size)")
    ap.add_argument(
        "--kernels", action="store_true", help="also GPU time per CUDA kernel (CUPTI; first batch size)"
    )
    ap.add_argument(
        "--provider", default="cuda", choices=("cuda", "cpu"), help="cpu: a smoke test of the script"
    )
    args = ap.parse_args()

    import onnxruntime as ort
    import torch

    import pyquant

    date = datetime.date.today().isoformat()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{date}-{args.tag}-cuda-ep-decode"
    meta = {
        "date": date,
        "commit": args.commit,
        "device": torch.cuda.get_device_name(0) if args.provider == "cuda" else _cpu_name(),
        "onnxruntime": ort.__version__,
        "torch": torch.__version__,
        "pyquant_build": pyquant.build_info(),
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "prompt": args.prompt,
        "tokens": args.tokens,
        "repeats": args.repeats,
        "dtype": args.dtype,
        "provider": args.provider,
        "cache_length": args.cache_length,
    }

    def save() -> None:  # after every case: a run stopped by its time limit keeps what it measured
        stem.with_suffix(".json").write_text(json.dumps({**meta, "results": results}, indent=1))
        stem.with_suffix(".md").write_text(_markdown(meta, results))

    results = []
    for shape in args.shape.split(","):
        model = _model(shape)
        vocab = SHAPES[shape]["vocab_size"]
        caches = args.cache.split(",")
        for cache in caches:
            if cache not in ("growing", "static", "static-graph"):
                ap.error(f"--cache: unknown {cache!r}")
        for scheme in args.schemes.split(","):
            for static in dict.fromkeys(c != "growing" for c in caches):
                with tempfile.TemporaryDirectory() as tmp:
                    t0 = time.perf_counter()
                    rep = pyquant.export_causal_lm(
                        _quantized(model, scheme, args.dtype == "float16"),
                        Path(tmp) / "lm.onnx",
                        static_cache=static,
                    )
                    export_s = time.perf_counter() - t0
                    for cache in (c for c in caches if (c != "growing") == static):
                        for b in (int(x) for x in args.batch.split(",")):
                            r = _ort_case(
                                rep.path,
                                args.provider,
                                b,
                                args.prompt,
                                args.tokens,
                                args.repeats,
                                vocab,
                                cache,
                                args.cache_length,
                            )
                            r.update(
                                shape=shape,
                                method=f"ort_{scheme}",
                                cache=cache,
                                batch=b,
                                file_mib=rep.file_bytes / 2**20,
                                export_s=export_s,
                                op_counts=rep.op_counts,
                            )
                            print(json.dumps({k: v for k, v in r.items() if k != "tokens"}), flush=True)
                            if (
                                args.profile
                                and b == int(args.batch.split(",")[0])
                                and cache != "static-graph"
                            ):
                                r["profile_us"] = _profile(
                                    rep.path, args.provider, b, args.prompt, vocab, tmp, cache
                                )
                                print(json.dumps(r["profile_us"]), flush=True)
                            if (
                                args.kernels
                                and b == int(args.batch.split(",")[0])
                                and args.provider == "cuda"
                            ):
                                r["kernels"] = _kernel_profile(
                                    rep.path, args.provider, b, args.prompt, vocab, cache
                                )
                                print(json.dumps(r["kernels"]), flush=True)
                            results.append(r)
                            save()
        if not args.no_torch and args.provider == "cuda":
            for b in (int(x) for x in args.batch.split(",")):
                r = _torch_case(model, b, args.prompt, args.tokens, args.repeats, vocab)
                r.update(shape=shape, method="torch_fp16_eager", batch=b)
                print(json.dumps(r), flush=True)
                results.append(r)
                save()
        del model

    print(stem.with_suffix(".md").read_text())
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"CPU {line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"CPU, {os.cpu_count()} cores"


def _markdown(meta: dict, results: list[dict]) -> str:
    lines = [
        f"# Generation with the KV cache on the {meta.get('provider', 'cuda').upper()} EP, {meta['date']}, "
        f"{meta['device']}",
        "",
        f"commit `{meta['commit']}`; onnxruntime {meta['onnxruntime']}, torch {meta['torch']}. Command: "
        f"`{meta['command']}`",
        "",
        f"Prompt {meta['prompt']} tokens in one step, then {meta['tokens']} decode steps (median of "
        f"{meta['repeats']}); ms. Random weights; every decoder linear quantized (RTN), lm_head and "
        f"embedding {meta.get('dtype', 'float16')}. Speedup = the unquantized model's ORT time with the same "
        "cache / this time. Cache: growing (no CUDA graphs), static (fixed-length buffers), static-graph "
        "(decode steps replayed as CUDA graphs)"
        + (f"; static buffers of {meta['cache_length']} slots." if meta.get("cache_length") else "."),
        "",
    ]
    for shape in dict.fromkeys(r["shape"] for r in results):
        lines += [
            f"## {shape}",
            "",
            "| method | cache | batch | prefill ms | decode ms / token | decode speedup | file MiB |",
            "|---|---|---|---|---|---|---|",
        ]
        base = {
            (r["batch"], r.get("cache", "growing")): r
            for r in results
            if r["shape"] == shape and r["method"] in ("ort_float16", "ort_float32", "ort_float")
        }
        for r in (r for r in results if r["shape"] == shape):
            b = base.get((r["batch"], r.get("cache", "growing")))
            sp = f"{b['decode_ms_per_token'] / r['decode_ms_per_token']:.2f}x" if b else ""
            mib = f"{r['file_mib']:.0f}" if "file_mib" in r else ""
            lines.append(
                f"| {r['method']} | {r.get('cache', '')} | {r['batch']} | {r['prefill_ms']:.2f} | "
                f"{r['decode_ms_per_token']:.2f} | {sp} | {mib} |"
            )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
