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


def test_cpu_ab_thread_clock(tmp_path, capsys, monkeypatch):
    """--threads 1 --clock thread reaches bench_cpu.py (CPU time of the calling thread) and fills the
    table; bench_cpu.py refuses the thread clock with more than one intra-op thread."""
    import pytest

    from bench import bench_cpu

    lib = get_library_path()
    commands = []
    run = cpu_ab.run
    monkeypatch.setattr(cpu_ab, "run", lambda lib, cmd: commands.append(cmd) or run(lib, cmd))
    args = ["--lib-a", lib, "--lib-b", lib, "--rounds", "1", "--shapes", "64x40", "--m", "20"]
    assert cpu_ab.main([*args, "--methods", "pyquant_int4_b128", "--threads", "1", "--clock", "thread"]) == 0
    assert len(commands) == 2 and all(" --threads 1 --clock thread " in " ".join(c) + " " for c in commands)
    text = capsys.readouterr().out
    assert "1 threads, thread clock" in text
    row = next(line for line in text.splitlines() if line.startswith("| pyquant_int4_b128 64x40 M=20 |"))
    assert row.count("(") == 2 and row.rstrip("|").strip().endswith("x")
    small = ["--methods", "pyquant_int4_b128", "--shapes", "64x40", "--m", "1"]
    assert bench_cpu.main(["--threads", "1", "--clock", "thread", *small]) == 0
    assert '"clock": "thread"' in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench_cpu.main(["--threads", "2", "--clock", "thread", *small])
