"""bench/cuda_ep_decode.py on the CPU EP with the tiny shape: the whole pipeline (random Llama,
quantize, export with the growing and the static cache, generate, JSON + markdown), the same
tokens from both caches, and the table's speedups."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "cuda_ep_decode.py"


def test_cpu_smoke(tmp_path) -> None:
    pytest.importorskip("transformers")
    import pyquant

    try:
        pyquant.get_library_path()
    except Exception as e:  # the op library is not built / installed
        pytest.skip(f"pyquant op library unavailable: {e}")
    cmd = [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--tag", "t", "--shape", "tiny"]
    cmd += ["--provider", "cpu", "--dtype", "float32", "--schemes", "float32,int4-b128,fp8-wo"]
    cmd += ["--batch", "1,2", "--prompt", "5", "--tokens", "2", "--repeats", "1", "--cache", "growing,static"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    (js,) = tmp_path.glob("*-t-cuda-ep-decode.json")
    o = json.loads(js.read_text())
    assert o["provider"] == "cpu" and o["dtype"] == "float32"
    rows = {(x["method"], x["batch"], x["cache"]): x for x in o["results"]}
    methods = ("ort_float32", "ort_int4-b128", "ort_fp8-wo")
    assert set(rows) == {(m, b, c) for m in methods for b in (1, 2) for c in ("growing", "static")}
    # 2 layers: 7 linears each, and each layer's key and value buffers written by KVCacheWrite
    assert rows[("ort_int4-b128", 1, "static")]["op_counts"] == {"MatMulInt4": 14, "KVCacheWrite": 4}
    for m in methods:
        for b in (1, 2):
            assert rows[(m, b, "static")]["tokens"] == rows[(m, b, "growing")]["tokens"]
    assert all(len(x["tokens"]) == x["batch"] and len(x["tokens"][0]) == 3 for x in o["results"])
    md = js.with_suffix(".md").read_text()
    assert "on the CPU EP" in md and "| ort_float32 | static | 1 |" in md and "1.00x" in md
