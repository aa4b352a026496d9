"""bench/cuda_ep_real_models.py: CLI, the numpy probe, shared external data, and prepare + run on CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import cuda_ep_real_models  # the script as a module (pyproject: pythonpath = ["."])

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "cuda_ep_real_models.py"


@pytest.mark.parametrize("sub", [[], ["prepare"], ["run"]])
def test_help(sub: list[str]) -> None:
    r = subprocess.run([sys.executable, str(SCRIPT), *sub, "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "usage" in r.stdout


def test_refit_probe_matches_sklearn() -> None:
    sk = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(4, 16))
    y = rng.integers(0, 4, 200)
    x = centers[y] + 1.5 * rng.normal(size=(200, 16))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    coef, b = cuda_ep_real_models.refit_probe(x, y, 4, c=10.0)
    ref = sk.LogisticRegression(max_iter=5000, C=10.0, tol=1e-10).fit(x, y)
    # same objective -> same optimum (intercepts up to a common shift, which changes no prediction)
    np.testing.assert_allclose(coef, ref.coef_, atol=2e-3 * np.abs(ref.coef_).max())
    np.testing.assert_array_equal(np.argmax(x @ coef.T + b, 1), ref.predict(x))


def test_externalize_shares_initializers(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    shared = rng.normal(size=(64, 32)).astype(np.float32)
    own = {"a": rng.normal(size=(32, 8)).astype(np.float32), "b": rng.normal(size=(32, 8)).astype(np.float32)}

    def model(name: str):  # noqa: ANN202
        g = helper.make_graph(
            [helper.make_node("MatMul", ["x", "E"], ["h"]), helper.make_node("MatMul", ["h", "W"], ["y"])],
            name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 64])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8])],
            [numpy_helper.from_array(shared, "E"), numpy_helper.from_array(own[name], "W")],
        )
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

    files = cuda_ep_real_models._externalize({"a": model("a"), "b": model("b")}, tmp_path)
    assert files == {"a": ["a.bin", "a.onnx", "shared.bin"], "b": ["b.bin", "b.onnx", "shared.bin"]}
    assert (tmp_path / "shared.bin").stat().st_size == shared.nbytes  # stored once
    x = rng.normal(size=(3, 64)).astype(np.float32)
    for name in ("a", "b"):
        onnx.checker.check_model(str(tmp_path / f"{name}.onnx"))
        sess = ort.InferenceSession(str(tmp_path / f"{name}.onnx"), providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ shared @ own[name], rtol=1e-4, atol=1e-4)


@pytest.mark.models
def test_prepare_and_run_on_cpu(tmp_path: Path) -> None:
    """prepare on a tiny subset (1 document per class, INT4 only), then run with the CPU EP in a
    process that must not import torch."""
    pytest.importorskip("transformers")
    pytest.importorskip("sklearn")
    try:
        import pyquant

        lib = pyquant.get_library_path()
        from pyquant.models import get_recipe

        get_recipe("minilm").load()
        from pyquant.models import data

        data.bbc_news(max_per_class=1)
    except Exception as e:
        pytest.skip(f"minilm / BBC packages or the op library unavailable: {e}")
    d = tmp_path / "rm"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "prepare", "--out", str(d), "--schemes", "int4", "--max-per-class", "2",
         "--check-docs", "2"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    manifest = json.loads((d / "manifest.json").read_text())
    (m,) = manifest["models"]
    assert m["pyquant_ops"] == {"MatMulInt4": 36} and m["dtype"] == "float16"
    assert all(v < 55e6 for v in manifest["file_bytes"].values())
    out = tmp_path / "res.json"
    code = (
        "import runpy, sys\n"
        "sys.argv = sys.argv[1:]\n"
        "try:\n"
        "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    if e.code:\n"
        "        raise\n"
        "assert 'torch' not in sys.modules, 'run imported torch'\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(SCRIPT), "run", "--dir", str(d), "--provider", "cpu", "--lib", lib,
         "--out", str(out), "--shapes", "1x16", "--warmup", "1", "--runs", "2", "--threads", "1"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "run imported torch" not in r.stderr
    res = json.loads(out.read_text())
    (row,) = res["results"]
    assert row["placement"]["pyquant_nodes"] == {"MatMulInt4@CPUExecutionProvider": 36}
    assert row["cosine_vs_float_torch"] > 0.85
    assert row["check_vs_torch"]["rel_rms_err"] < 0.05
    assert 0.0 <= row["accuracy_refit_probe"] <= 1.0 and row["latency"][0]["median_ms"] > 0
    assert out.with_suffix(".md").read_text().startswith("# MiniLM")
