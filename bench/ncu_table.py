"""Summarise the Nsight Compute CSV files of bench/device/ncu_points.sh into one markdown table and
a JSON file: per profiled kernel its time alone, launch shape, occupancy, issue rate, eligible
warps, DRAM throughput, tensor-pipe use and the three largest warp-stall reasons.

    python bench/ncu_table.py <dir of *.csv> --out bench/results/<date>-<device>-ncu-points
        [--header "device, commit, command"]

Stall reasons are ncu's smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio: cycles a
warp spends stalled for that reason per instruction issued (summed over reasons: the cycles between
two instructions of one warp)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
from pathlib import Path

STALL = re.compile(r"^smsp__average_warps_issue_stalled_(.+)_per_issue_active\.ratio$")
TENSOR = re.compile(r"^sm__pipe_tensor_op_[hg]mma_cycles_active\.avg\.pct_of_peak_sustained_active$")
PIPE = re.compile(r"^sm__inst_executed_pipe_([a-z0-9_]+)\.avg\.pct_of_peak_sustained_active$")
POINT = re.compile(r"^(?P<method>.+)-(?P<k>\d+)x(?P<n>\d+)-m(?P<m>\d+)$")


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


# Units ncu may print (--print-units auto scales them) -> factor to the base unit (ns, byte).
UNIT_SCALE = {
    "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
    "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9,
}  # fmt: skip


def parse_ncu_csv(text: str) -> list[dict]:
    """Rows of `ncu --csv --page raw` (one per kernel launch) as {column: value}; ncu's own
    messages (==PROF==, ==WARNING==) are dropped, the units row is applied (times in ns, sizes
    in bytes) and numbers become floats."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("==")]
    if not lines:
        return []
    reader = csv.reader(io.StringIO("\n".join(lines)))
    header = next(reader)
    units: dict[str, str] = {}
    rows = []
    for values in reader:
        if len(values) != len(header):
            continue
        row = dict(zip(header, values, strict=True))
        if row.get("ID", "").strip() == "" or _number(row["ID"]) is None:
            units = {k: v.strip() for k, v in row.items()}  # the units row
            continue
        parsed = {}
        for key, value in row.items():
            num = _number(value)
            if num is not None and units.get(key) in UNIT_SCALE:
                num *= UNIT_SCALE[units[key]]
            parsed[key] = num if num is not None else value
        rows.append(parsed)
    return rows


def kernel_summary(row: dict) -> dict:
    """The figures of one kernel launch that the shortfall notes use."""
    name = str(row.get("Kernel Name", "?"))
    short = re.split(r"[<(]", name, maxsplit=1)[0].replace("void ", "").strip()
    stalls = {m.group(1): v for k, v in row.items() if (m := STALL.match(k)) and isinstance(v, float)}
    top = sorted(stalls.items(), key=lambda kv: -kv[1])[:3]
    tensor = next((v for k, v in row.items() if TENSOR.match(k) and isinstance(v, float)), None)
    pipes = {m.group(1): v for k, v in row.items() if (m := PIPE.match(k)) and isinstance(v, float)}
    duration_ns = row.get("gpu__time_duration.sum")
    dram_bytes = row.get("dram__bytes_read.sum")
    return {
        "kernel": short,
        "us": duration_ns / 1000.0 if isinstance(duration_ns, float) else None,
        "grid": row.get("launch__grid_size"),
        "block": row.get("launch__block_size"),
        "regs": row.get("launch__registers_per_thread"),
        "waves": row.get("launch__waves_per_multiprocessor"),
        "warps_per_sm": row.get("sm__warps_active.avg.per_cycle_active"),
        "warps_per_scheduler": row.get("smsp__warps_active.avg.per_cycle_active"),
        "eligible_per_scheduler": row.get("smsp__warps_eligible.avg.per_cycle_active"),
        "issue_per_scheduler_cycle": row.get("smsp__issue_active.avg.per_cycle_active"),
        "dram_pct": row.get("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        "dram_mb": dram_bytes / 1e6 if isinstance(dram_bytes, float) else None,
        "tensor_pct": tensor,
        "stall_cycles_per_issue": sum(stalls.values()) if stalls else None,
        "top_stalls": [[k, v] for k, v in top],
        # the three busiest pipes by instructions executed, % of peak (ncu_points.sh PIPES=1)
        "top_pipes": [[k, v] for k, v in sorted(pipes.items(), key=lambda kv: -kv[1])[:3]],
    }


def _fmt(v, spec: str = ".1f") -> str:
    return "" if v is None or isinstance(v, str) else format(v, spec)


def markdown(points: list[dict], header: str = "") -> str:
    out = ["# Nsight Compute at the goal points", ""]
    if header:
        out += [header, ""]
    out += [
        "Each node run alone (not in the benchmark's chain of layers), its last of four runs profiled; "
        "`us` = the kernel alone. Warps / eligible / issue: per scheduler (4 per SM; a scheduler can "
        "issue one instruction per cycle). Stalls: cycles per issued instruction, the three largest reasons.",
        "",
        "| method | K x N | M | kernel | us | grid x block | regs | warps/sched | eligible | issue/cycle "
        "| DRAM % | DRAM MB | tensor % | top stalls | busiest pipes (% of peak) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        for kern in p["kernels"]:
            stalls = ", ".join(f"{k} {v:.1f}" for k, v in kern["top_stalls"])
            cells = [
                p["method"],
                f"{p['k']} x {p['n']}",
                str(p["m"]),
                f"`{kern['kernel'][:48]}`",
                _fmt(kern["us"]),
                f"{_fmt(kern['grid'], '.0f')} x {_fmt(kern['block'], '.0f')}",
                _fmt(kern["regs"], ".0f"),
                _fmt(kern["warps_per_scheduler"]),
                _fmt(kern["eligible_per_scheduler"], ".2f"),
                _fmt(kern["issue_per_scheduler_cycle"], ".2f"),
                _fmt(kern["dram_pct"]),
                _fmt(kern["dram_mb"]),
                _fmt(kern["tensor_pct"]),
                stalls,
                ", ".join(f"{k} {v:.0f}" for k, v in kern.get("top_pipes", [])),
            ]
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def collect(directory: Path) -> list[dict]:
    points = []
    for path in sorted(directory.glob("*.csv")):
        match = POINT.match(path.stem)
        if not match:
            continue
        kernels = [kernel_summary(r) for r in parse_ncu_csv(path.read_text(errors="replace"))]
        points.append(
            {
                "method": match["method"],
                "k": int(match["k"]),
                "n": int(match["n"]),
                "m": int(match["m"]),
                "kernels": kernels,
            }
        )
    order = {"pyquant_int4": 0, "pyquant_fp8": 1}
    points.sort(key=lambda p: (order.get(p["method"], 2), p["m"], p["k"], p["n"], p["method"]))
    return points


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--out", type=Path, required=True, help="output path without suffix (.md and .json)")
    ap.add_argument("--header", default="", help="a line with device, commit and command")
    args = ap.parse_args()
    points = collect(args.directory)
    if not points:
        raise SystemExit(f"no <method>-<K>x<N>-m<M>.csv files with kernels under {args.directory}")
    args.out.with_suffix(".json").write_text(json.dumps({"header": args.header, "points": points}, indent=1))
    args.out.with_suffix(".md").write_text(markdown(points, args.header))
    print(args.out.with_suffix(".md"))


if __name__ == "__main__":
    main()
