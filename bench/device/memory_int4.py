"""Device memory of a MatMulInt4 session on the CUDA EP against the packed weight bytes.

    python3 bench/device/memory_int4.py [--layers 8] [--shape 4096x14336] [--out DIR]

Builds a model of L MatMulInt4 layers (block 128, symmetric, fp16), then reads the device's free
memory (cudaMemGetInfo through torch) before the session, after creating it, after a decode run
(M = 1: the in-place kernels only) and after a prefill run (M = 512: the Hopper GEMM prepares its
transposed scales / zero terms once per node, 2 x the scales' bytes, and with --shuffled-copy its
copy of the codes). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main() -> None:
    import onnxruntime as ort
    import torch

    from bench.bench_cuda import build_model
    from pyquant.ort import session_options

    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--shape", default="4096x14336")
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--shuffled-copy",
        action="store_true",
        help="PYQUANT_INT4_SHUFFLED_COPY=1: the Hopper GEMM's weight copy",
    )
    a = ap.parse_args()
    if a.shuffled_copy:
        os.environ["PYQUANT_INT4_SHUFFLED_COPY"] = "1"
    k, n = (int(v) for v in a.shape.split("x"))
    rng = np.random.default_rng(0)
    model = build_model("pyquant_int4", rng, k, n, a.layers)
    packed = a.layers * (n * k // 2 + n * (k // 128) * 2)
    torch.cuda.init()
    torch.cuda.synchronize()

    def used() -> int:
        free, total = torch.cuda.mem_get_info()
        return total - free

    base = used()
    # No arena growth by ORT's allocator beyond what is asked (kSameAsRequested), so the numbers
    # are the buffers themselves.
    opts = {"device_id": "0", "arena_extend_strategy": "kSameAsRequested"}
    providers = [("CUDAExecutionProvider", opts)]
    sess = ort.InferenceSession(model, sess_options=session_options(), providers=providers)
    after_create = used()
    res = {
        "shape": a.shape,
        "layers": a.layers,
        "shuffled_copy": a.shuffled_copy,
        "packed_bytes": packed,
        "session_bytes": after_create - base,
    }
    for m in (1, 512):
        x = (rng.standard_normal((m, k)) * 0.5).astype(np.float16)
        sess.run(None, {"X": x})
        torch.cuda.synchronize()
        res[f"after_run_m{m}_bytes"] = used() - base
    res["session_over_packed"] = round(res["session_bytes"] / packed, 3)
    res["after_prefill_over_packed"] = round(res["after_run_m512_bytes"] / packed, 3)
    line = json.dumps(res)
    print(line)
    if a.out:
        import datetime

        day = os.environ.get("DAY", datetime.date.today().isoformat())
        name = f"{day}-memory-int4{'-shuffled' if a.shuffled_copy else ''}.json"
        with open(os.path.join(a.out, name), "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
