"""bench/cpu_ab.py: both builds' bench_cpu.py lines are parsed into one A / B table (here A = B = the
installed library, one round on a tiny layer), and the JSON keeps every round's time."""

from __future__ import annotations

import json

from bench import cpu_ab  # the script as a module (pyproject: pythonpath = ["."])
from pyquant import get_library_path


def test_cpu_ab_table(tmp_path, capsys):
    lib = get_library_path()
    out = tmp_path / "ab"
    args = ["--lib-a", lib, "--lib-b", lib, "--rounds", "1", "--shapes", "64x40", "--m", "20"]
    assert cpu_ab.main([*args, "--methods", "pyquant_int4_b128,fp32_matmul", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for point in ("pyquant_int4_b128 64x40 M=20", "fp32_matmul 64x40 M=20"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {point} |"))
        assert row.count("(") == 2 and row.rstrip("|").strip().endswith("x")  # A, B and the ratio filled
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert len(rows) == 2 and all(len(r["a_ms"]) == 1 and len(r["b_ms"]) == 1 for r in rows)
