"""bench/plot_cuda.py: the speedup plot of a bench_cuda.py JSON, and a clear exception (not an exit
of bench_cuda.py itself) for a run that timed no torch fp16 rows."""

from __future__ import annotations

import json

import pytest

from bench import plot_cuda


def _write(tmp_path, methods):
    rows = [
        {"K": 64, "N": 128, "M": m, "method": method, "us": 10.0 + m} for method in methods for m in (1, 16)
    ]
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"rows": rows}))
    return path


def test_plot_against_torch_fp16(tmp_path):
    pytest.importorskip("matplotlib")
    png = plot_cuda.plot(_write(tmp_path, ["pyquant_int4", "torch_fp16"]))
    assert png.exists() and png.stat().st_size > 0


def test_no_baseline_is_an_exception(tmp_path):
    pytest.importorskip("matplotlib")
    with pytest.raises(plot_cuda.NoBaselineError, match="no torch_fp16 rows"):
        plot_cuda.plot(_write(tmp_path, ["pyquant_int4", "pyquant_int4_coop"]))
