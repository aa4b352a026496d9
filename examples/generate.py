"""Quantize a causal LM, export it with its KV cache, and generate text with it in ONNX Runtime.

python examples/generate.py                                # SmolLM2-135M (models/install.sh), INT4
python examples/generate.py --scheme fp8-wo --tokens 48
python examples/generate.py --provider cuda --dtype float16  # on a GPU with onnxruntime-gpu
python examples/generate.py --provider cuda --dtype float16 --cuda-graph  # static cache, CUDA graphs

Prints the continuation of a prompt from the float PyTorch model and from the quantized export in
ORT (greedy decoding: prompt in one step, then one token per step against the cache), how many of
the new tokens agree with the quantized model in torch (the export's check) and with the float one
(RTN INT4 on a 135M model drifts early; `--scheme fp8-wo` stays close), and the time per step.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import pyquant
import pyquant.ort
from pyquant.models import get_recipe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="recipe name or HF causal-LM directory")
    ap.add_argument("--scheme", default="int4-b64-asym", help="a recipe scheme (int4, fp8, fp8-wo, ...)")
    ap.add_argument("--prompt", default="The capital of France is a city that")
    ap.add_argument("--tokens", type=int, default=32, help="new tokens to generate")
    ap.add_argument("--provider", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--dtype", default="float32", choices=("float32", "float16"))
    ap.add_argument(
        "--cuda-graph",
        action="store_true",
        help="export a static cache and replay decode steps as CUDA graphs (--provider cuda)",
    )
    args = ap.parse_args()
    if args.cuda_graph and args.provider != "cuda":
        ap.error("--cuda-graph needs --provider cuda")

    recipe = get_recipe(args.model)
    model, tokenizer = recipe.load()
    enc = tokenizer([args.prompt], return_tensors="pt")
    with torch.no_grad():
        ref = model.generate(**enc, max_new_tokens=args.tokens, do_sample=False)[
            0, enc["input_ids"].shape[1] :
        ]

    # Round-to-nearest schemes need no calibration data; the recipe's tuned ones (AWQ / GPTQ) do:
    # `pyquant export --model smollm2 --scheme int4 --kv-cache` runs them.
    config = recipe.quantize_config(args.scheme)
    pyquant.quantize(model, config, progress=True)
    with torch.no_grad():  # the quantized model in torch eager: what the export must reproduce
        qref = model.generate(**enc, max_new_tokens=args.tokens, do_sample=False)[
            0, enc["input_ids"].shape[1] :
        ]
    if args.dtype == "float16":
        model = model.half()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lm.onnx"
        print(pyquant.export_causal_lm(model, path, static_cache=args.cuda_graph))
        provider = ("cuda", {"enable_cuda_graph": "1"}) if args.cuda_graph else args.provider
        session = pyquant.ort.make_session(path, providers=(provider,))
        ids = enc["input_ids"].numpy()
        # a static cache of one length for every call, so that later calls replay the first's graphs
        kw = {"cache_length": ids.shape[1] + max(args.tokens, 4)} if args.cuda_graph else {}
        pyquant.ort.generate(session, ids, 4, device=args.provider, **kw)  # warm-up (and graph capture)
        t0 = time.perf_counter()
        prefill = pyquant.ort.generate(session, ids, 1, device=args.provider, **kw)
        t1 = time.perf_counter()
        out = pyquant.ort.generate(session, ids, args.tokens, device=args.provider, **kw)[0]
        t2 = time.perf_counter()

    def agree(a: np.ndarray, b: np.ndarray) -> int:  # length of the common prefix
        n = min(len(a), len(b))
        return int(np.argmin(np.append(a[:n] == b[:n], False)))

    step_ms = ((t2 - t1) - (t1 - t0)) / max(len(out) - 1, 1) * 1e3
    print(f"\nprompt: {args.prompt!r}")
    print(f"float torch: {tokenizer.decode(ref)!r}")
    print(f"{args.scheme} ORT: {tokenizer.decode(out)!r}")
    print(
        f"first {agree(out, qref.numpy())} of {len(out)} new tokens identical to the quantized model "
        f"in torch, "
        f"{agree(out, ref.numpy())} to the float one; prompt step {(t1 - t0) * 1e3:.1f} ms, "
        f"then {step_ms:.1f} ms per token ({args.provider}, {args.dtype}; first token {int(prefill[0, 0])})"
    )


if __name__ == "__main__":
    main()
