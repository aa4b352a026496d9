"""bench/goals_cuda.py: benchmark rows become the issues' goal table (independent numbers worked by hand)."""

from __future__ import annotations

import json

import pytest

from bench import goals_cuda  # the script as a module (pyproject: pythonpath = ["."])


def _row(m: int, method: str, us: float, pct: float = 0.0, k: int = 64, n: int = 32) -> dict:
    return {"K": k, "N": n, "M": m, "method": method, "us": us, "pct_floor": pct}


def _write(tmp_path, name: str, rows: list[dict], commit: str = "abc1234"):
    meta = {"device": "NVIDIA H200", "commit": commit, "command": "python bench/bench_cuda.py ..."}
    path = tmp_path / name
    path.write_text(json.dumps({"meta": meta, "rows": rows}))
    return path


def test_goals_from_rows(tmp_path):
    rows = [
        _row(1, "pyquant_int4", 10.0, pct=80.0),
        _row(1, "pyquant_fp8", 12.0, pct=90.0),
        _row(1, "torch_fp16", 30.0),
        _row(1, "ort_matmul_fp16", 31.0),
        _row(1, "ort_matmulnbits", 15.0),
        _row(16, "pyquant_int4", 12.0),
        _row(16, "torch_fp16", 33.0),
        _row(16, "ort_matmul_fp16", 30.0),  # the faster fp16: 30 / 12 = 2.5x (met)
        _row(256, "pyquant_int4", 60.0),
        _row(256, "pyquant_fp8", 40.0),
        _row(256, "torch_fp16", 55.0),  # INT4 slower than fp16 at 256
        _row(256, "ort_matmulnbits", 50.0),  # and slower than MatMulNBits
        _row(4096, "pyquant_int4", 800.0),
        _row(4096, "pyquant_fp8", 500.0),
        _row(4096, "torch_fp16", 780.0),  # 0.975x (met); FP8 1.56x (missed)
    ]
    rows.append({"K": 64, "N": 32, "M": 16, "method": "pyquant_fp8", "error": "out of memory"})  # no figure
    first = _write(tmp_path, "a.json", rows)
    # a later file replaces the INT4 M = 1 row
    second = _write(tmp_path, "b.json", [_row(1, "pyquant_int4", 8.0, pct=90.0)], commit="def5678")
    table, metas = goals_cuda.load_rows([first, second])
    g = goals_cuda.layer_goals(table, 64, 32)
    assert g["int4_m1_floor"] == 90.0
    assert g["int4_m16_vs_fp16"] == pytest.approx(2.5)
    assert g["int4_slower_than_fp16"] == [256]
    assert g["int4_large_vs_fp16"][4096] == pytest.approx(0.975)
    assert g["int4_slower_than_matmulnbits"] == [256]
    assert g["fp8_m1_floor"] == 90.0
    assert g["fp8_large_vs_fp16"][4096] == pytest.approx(1.56)
    assert g["fp8_slower_than_fp16"] == []
    text = goals_cuda.goals_markdown(table, metas)
    assert "| 64 x 32 | 90 % | 2.50x | 256 | 4096: 0.97x | 256 | 90 % | 4096: **1.56x** | none |" in text
    assert "`b.json`: NVIDIA H200, commit `def5678`" in text


def test_not_a_result_file(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"rows": []}))
    with pytest.raises(SystemExit, match="not a bench_cuda.py result"):
        goals_cuda.load_rows([path])
