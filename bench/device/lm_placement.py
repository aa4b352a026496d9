"""Device side: where ORT's CUDA EP places each node of a causal LM exported with its KV cache
(growing and static), from one profiled generate(): node counts per provider, and the op types of
every node not on the CUDA EP (Memcpy nodes included: they keep CUDA graphs from replaying), and
the optimized graph's op types (SimplifiedLayerNormalization where ORT fused an RMSNorm).

    python3 bench/device/lm_placement.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    import onnxruntime as ort

    import pyquant
    import pyquant.ort
    from tests.pyquant.tiny_models import tiny_llama

    model = pyquant.quantize(
        tiny_llama(eager=False, hidden_size=128, intermediate_size=256), pyquant.Int4Config(64)
    )
    model = model.half()
    with tempfile.TemporaryDirectory() as tmp:
        for static in (False, True):
            path = Path(tmp) / f"lm_{static}.onnx"
            pyquant.export_causal_lm(model, path, static_cache=static)
            so = ort.SessionOptions()
            so.enable_profiling = True
            so.profile_file_prefix = str(Path(tmp) / f"prof_{static}")
            sess = pyquant.ort.make_session(path, providers=("cuda",), options=so, strict=True)
            ids = np.random.default_rng(0).integers(0, 128, (2, 6))
            pyquant.ort.generate(sess, ids, 3, device="cuda", **({"cache_length": 12} if static else {}))
            events = json.loads(Path(sess.end_profiling()).read_text())
            nodes: dict[str, tuple[str, str]] = {}
            for ev in events:
                a = ev.get("args", {})
                if ev.get("cat") == "Node" and "provider" in a and "op_name" in a:
                    nodes[ev["name"].rsplit("_kernel_time", 1)[0]] = (a["op_name"], a["provider"])
            per_provider: dict[str, int] = {}
            off_cuda: dict[str, int] = {}
            op_types: dict[str, int] = {}
            for op, prov in nodes.values():
                per_provider[prov] = per_provider.get(prov, 0) + 1
                op_types[op] = op_types.get(op, 0) + 1
                if prov != "CUDAExecutionProvider":
                    off_cuda[f"{op}@{prov}"] = off_cuda.get(f"{op}@{prov}", 0) + 1
            ops = dict(sorted(op_types.items(), key=lambda kv: -kv[1]))
            record = {"static_cache": static, "nodes": per_provider, "not_on_cuda": off_cuda, "op_types": ops}
            print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
