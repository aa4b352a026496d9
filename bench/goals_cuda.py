"""The CUDA issues' goals, checked against bench_cuda.py results (JSON files from one or more runs).

    python bench/goals_cuda.py bench/results/2026-11-29-h200-s49-all-*-bench-cuda.json \
        --out bench/results/2026-11-29-h200-s49-goals.md

Per layer (K x N), from the rows of pyquant_int4 / pyquant_fp8 / ort_matmulnbits / torch_fp16 /
ort_matmul_fp16 in the files (a later file's row for the same layer, M and method replaces an
earlier one, so a focused re-run can follow a full one; rows of a failed method are left out):

* INT4 (issue 4): % of the HBM floor at M = 1 (goal >= 85 %); speedup over fp16 at M = 16 (>= 2.5x);
  the M <= 256 where it is slower than fp16; speedup over fp16 at M >= 2048 (>= 0.95x); the M where
  it is slower than MatMulNBits.
* FP8 (issue 5): % of the floor at M = 1 (>= 85 %, 1 byte per weight); speedup over fp16 at M >= 2048,
  activation quantization included (>= 1.6x); the M where it is slower than fp16.

"fp16" is the faster of torch fp16 and ORT's fp16 MatMul in the same run (the stricter reading).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path

FP16_METHODS = ("torch_fp16", "ort_matmul_fp16")
INT4_M1_FLOOR = 85.0
INT4_M16_SPEEDUP = 2.5
INT4_LARGE_M_SPEEDUP = 0.95
FP8_M1_FLOOR = 85.0
FP8_LARGE_M_SPEEDUP = 1.6
LARGE_M = 2048
HEADER = (
    "K x N",
    "INT4 M=1 % floor (>= 85)",
    "INT4 M=16 vs fp16 (>= 2.5x)",
    "INT4 slower than fp16 at M <= 256",
    "INT4 vs fp16 at M >= 2048 (>= 0.95x)",
    "INT4 slower than MatMulNBits at M",
    "FP8 M=1 % floor (>= 85)",
    "FP8 vs fp16 at M >= 2048 (>= 1.6x)",
    "FP8 slower than fp16 at M",
)


def load_rows(paths: Iterable[str | Path]) -> tuple[dict, list[dict]]:
    """(layer, M, method) -> row, later files winning; and the files' meta records."""
    table: dict[tuple[int, int, int, str], dict] = {}
    metas = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        if "rows" not in data or "meta" not in data:
            raise SystemExit(f"{path}: not a bench_cuda.py result (no 'rows' / 'meta')")
        metas.append({**data["meta"], "file": Path(path).name, "path": str(path)})
        for row in data["rows"]:
            if "us" in row:  # rows of a failed method carry "error" instead (left out: no figure)
                table[(row["K"], row["N"], row["M"], row["method"])] = row
    return table, metas


def _fp16_us(table: dict, k: int, n: int, m: int) -> float | None:
    times = [table[(k, n, m, f)]["us"] for f in FP16_METHODS if (k, n, m, f) in table]
    return min(times) if times else None


def layer_goals(table: dict, k: int, n: int) -> dict:
    """The goal figures of one layer (None where the runs lack the rows)."""
    ms = sorted({m for (kk, nn, m, _) in table if (kk, nn) == (k, n)})

    def us(m: int, method: str) -> float | None:
        row = table.get((k, n, m, method))
        return None if row is None else row["us"]

    def speedup(m: int, method: str) -> float | None:
        ours, fp16 = us(m, method), _fp16_us(table, k, n, m)
        return None if ours is None or fp16 is None else fp16 / ours

    def floor_pct(method: str) -> float | None:
        row = table.get((k, n, 1, method))
        return None if row is None else row["pct_floor"]

    def slower_than_fp16(method: str, max_m: int) -> list[int]:
        return [m for m in ms if m <= max_m and (v := speedup(m, method)) is not None and v < 1]

    large = [m for m in ms if m >= LARGE_M]
    return {
        "int4_m1_floor": floor_pct("pyquant_int4"),
        "int4_m16_vs_fp16": speedup(16, "pyquant_int4"),
        "int4_slower_than_fp16": slower_than_fp16("pyquant_int4", 256),
        "int4_large_vs_fp16": {m: speedup(m, "pyquant_int4") for m in large},
        "int4_slower_than_matmulnbits": [
            m
            for m in ms
            if us(m, "pyquant_int4") is not None
            and us(m, "ort_matmulnbits") is not None
            and us(m, "pyquant_int4") > us(m, "ort_matmulnbits")
        ],
        "fp8_m1_floor": floor_pct("pyquant_fp8"),
        "fp8_large_vs_fp16": {m: speedup(m, "pyquant_fp8") for m in large},
        "fp8_slower_than_fp16": slower_than_fp16("pyquant_fp8", max(ms, default=0)),
    }


def _fmt(v: float | None, unit: str = "", goal: float | None = None) -> str:
    if v is None:
        return "-"
    s = f"{v:.0f} %" if unit == "%" else f"{v:.2f}x"
    return s if goal is None or v >= goal else f"**{s}**"


def _fmt_ms(ms: list[int]) -> str:
    return ", ".join(map(str, ms)) if ms else "none"


def _fmt_large(d: dict[int, float | None], goal: float) -> str:
    return " / ".join(f"{m}: {_fmt(v, goal=goal)}" for m, v in d.items()) or "-"


def goals_markdown(table: dict, metas: list[dict]) -> str:
    layers = sorted({(k, n) for (k, n, _, _) in table})
    lines = [
        "# CUDA goals (issues 4 and 5) from bench_cuda.py results",
        "",
        "Command: `python bench/goals_cuda.py " + " ".join(m["path"] for m in metas) + "`. Inputs:",
        "",
    ]
    for m in metas:
        lines.append(f"* `{m['file']}`: {m['device']}, commit `{m['commit']}`, `{m['command']}`")
    lines += [
        "",
        "fp16 = the faster of torch fp16 and ORT's fp16 MatMul in the same run; **bold** = goal missed "
        "(before rounding: a bold 1.60x is below 1.6).",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    for k, n in layers:
        g = layer_goals(table, k, n)
        cells = [
            f"{k} x {n}",
            _fmt(g["int4_m1_floor"], "%", INT4_M1_FLOOR),
            _fmt(g["int4_m16_vs_fp16"], goal=INT4_M16_SPEEDUP),
            _fmt_ms(g["int4_slower_than_fp16"]),
            _fmt_large(g["int4_large_vs_fp16"], INT4_LARGE_M_SPEEDUP),
            _fmt_ms(g["int4_slower_than_matmulnbits"]),
            _fmt(g["fp8_m1_floor"], "%", FP8_M1_FLOOR),
            _fmt_large(g["fp8_large_vs_fp16"], FP8_LARGE_M_SPEEDUP),
            _fmt_ms(g["fp8_slower_than_fp16"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="bench_cuda.py JSON files (later ones override earlier rows)")
    ap.add_argument("--out", help="also write the table to this markdown file")
    args = ap.parse_args(argv)
    table, metas = load_rows(args.results)
    text = goals_markdown(table, metas)
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
