"""bench/ncu_table.py: ncu's raw CSV page (units row, its own messages) becomes the shortfall table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench import ncu_table  # the script as a module (pyproject: pythonpath = ["."])

# ruff: noqa: E501  (one ncu CSV row per line)

CSV = """==PROF== Connected to process 42 (/usr/bin/python3.12)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","gpu__time_duration.sum","launch__grid_size","launch__block_size","launch__registers_per_thread","smsp__warps_active.avg.per_cycle_active","smsp__warps_eligible.avg.per_cycle_active","smsp__issue_active.avg.per_cycle_active","dram__throughput.avg.pct_of_peak_sustained_elapsed","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","smsp__average_warps_issue_stalled_wait_per_issue_active.ratio","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio","smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio","sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
"","","","","","","","","","","","Mbyte","usecond","","","register/thread","warp","warp","","%","ratio","ratio","ratio","ratio","%"
"0","42","python3.12","host","void pyquant::int4_gemv_kernel<__half, 1>(const T1 *, int)","1","7","(128, 1, 1)","(1024, 1, 1)","0","9.0","8.39","3.61","1,024","128","64","3.9","0.41","0.22","71.5","9.5","1.2","0.4","2.5","0"
==PROF== Disconnected from process 42
"""


def test_parse_applies_units_and_drops_messages() -> None:
    rows = ncu_table.parse_ncu_csv(CSV)
    assert len(rows) == 1
    assert rows[0]["gpu__time_duration.sum"] == 3610.0  # usecond -> ns
    assert rows[0]["dram__bytes_read.sum"] == 8.39e6  # Mbyte -> byte
    assert rows[0]["launch__grid_size"] == 1024.0  # thousands separator


def test_summary_and_table(tmp_path: Path) -> None:
    (tmp_path / "pyquant_int4-4096x4096-m1.csv").write_text(CSV)
    (tmp_path / "notes.csv").write_text("not a point")
    points = ncu_table.collect(tmp_path)
    assert [(p["method"], p["k"], p["n"], p["m"]) for p in points] == [("pyquant_int4", 4096, 4096, 1)]
    kern = points[0]["kernels"][0]
    assert kern["kernel"] == "pyquant::int4_gemv_kernel"
    assert abs(kern["us"] - 3.61) < 1e-9 and abs(kern["dram_mb"] - 8.39) < 1e-9
    assert [s[0] for s in kern["top_stalls"]] == ["long_scoreboard", "math_pipe_throttle", "wait"]
    assert abs(kern["stall_cycles_per_issue"] - 13.6) < 1e-9
    assert kern["tensor_pct"] == 0.0
    md = ncu_table.markdown(points, "device X, commit abc")
    assert "| pyquant_int4 | 4096 x 4096 | 1 | `pyquant::int4_gemv_kernel` | 3.6 | 1024 x 128 | 64 |" in md
    out = tmp_path / "res"
    sys.argv = ["ncu_table.py", str(tmp_path), "--out", str(out), "--header", "h"]
    ncu_table.main()
    assert json.loads(out.with_suffix(".json").read_text())["points"][0]["m"] == 1
