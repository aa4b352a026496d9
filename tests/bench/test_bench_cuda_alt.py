"""bench_cuda.py's *_alt methods: another build of the library (PYQUANT_ALT_LIBRARY) registered in
their sessions, a clear stop when it is not given (the timing itself needs a GPU)."""

from __future__ import annotations

import importlib
import sys

import pytest

from bench import bench_cuda  # the script as a module (pyproject: pythonpath = ["."])


def _methods_module(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("PYQUANT_ALT_LIBRARY", raising=False)
    else:
        monkeypatch.setenv("PYQUANT_ALT_LIBRARY", value)
    mod = importlib.reload(sys.modules["bench_cuda_methods"])  # the module bench_cuda reads
    monkeypatch.setattr(bench_cuda, "METHOD_ENV", mod.METHOD_ENV)
    return mod


def test_alt_methods_take_the_other_library(monkeypatch):
    mod = _methods_module(monkeypatch, "/x/libpyquant_ops.so")
    for op in ("int4", "fp8"):
        assert mod.METHOD_ENV[f"pyquant_{op}_alt"] == {"PYQUANT_LIBRARY": "/x/libpyquant_ops.so"}
    assert "pyquant_int4_alt" not in mod.METHODS  # not in the default list


def test_alt_env_knobs(monkeypatch):
    monkeypatch.setenv("PYQUANT_ALT_ENV", "PYQUANT_INT4_SHUF_XAHEAD=2, PYQUANT_INT4_SHUF_VARIANT=4")
    mod = _methods_module(monkeypatch, "/x/lib.so")
    assert mod.METHOD_ENV["pyquant_int4_alt"] == {
        "PYQUANT_LIBRARY": "/x/lib.so",
        "PYQUANT_INT4_SHUF_XAHEAD": "2",
        "PYQUANT_INT4_SHUF_VARIANT": "4",
    }
    assert "PYQUANT_INT4_SHUF_XAHEAD" not in mod.METHOD_ENV["pyquant_int4_all"]  # the alt build's only
    monkeypatch.setenv("PYQUANT_ALT_ENV", "XAHEAD=2")
    with pytest.raises(SystemExit, match="PYQUANT_ALT_ENV"):
        _methods_module(monkeypatch, "/x/lib.so")
    monkeypatch.delenv("PYQUANT_ALT_ENV")
    _methods_module(monkeypatch, None)  # leave the module as the other tests expect


def test_alt_method_without_library_stops_clearly(monkeypatch):
    _methods_module(monkeypatch, None)
    with pytest.raises(SystemExit, match="PYQUANT_ALT_LIBRARY"):
        bench_cuda.bench_ort("pyquant_int4_alt", b"", 64, 64, 1, [1])


def test_markdown_names_the_alt_library():
    meta = {
        "date": "d",
        "device": "dev",
        "commit": "abc",
        "onnxruntime": "1",
        "torch": "2",
        "copy_bandwidth_TBps": 3.0,
        "command": "c",
        "alt_library": "/tmp/a/libpyquant_ops.so",
        "alt_commit": "def",
    }
    text = bench_cuda.markdown(meta, [], [1], ["pyquant_int4", "pyquant_int4_alt"])
    assert "`*_alt` methods: the library `/tmp/a/libpyquant_ops.so`, commit `def`." in text
    assert "_alt` methods" not in bench_cuda.markdown(meta, [], [1], ["pyquant_int4"])
