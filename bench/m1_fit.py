"""Per-layer time at M = 1 against the bytes a layer must read, from a bench_cuda.py JSON of a size
sweep (`--m 1 --shapes 512x512,...,8192x8192`): for each method, the time of the smallest layer
(what a layer costs in a chain of layers whatever its weights: launch, first DRAM round trip, tail)
and, per larger layer, the rate at which the bytes it adds over the next smaller layer stream:
(bytes - bytes_prev) / (t - t_prev).

    python bench/m1_fit.py bench/results/2026-11-24-h100-s17-sizes-m1-bench-cuda.json

It also prints, per layer, the best % of the HBM floor a kernel with that fixed cost could reach
if it streamed at the run's copy bandwidth: floor / (t_min + floor)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def fit(rows: list[dict]) -> dict[str, list[dict]]:
    by_method: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("M") == 1 and "us" in r:
            by_method.setdefault(r["method"], []).append(r)
    out = {}
    for method, rs in by_method.items():
        rs.sort(key=lambda r: r["bytes"])
        base = rs[0]
        lines = []
        for prev, r in zip([None, *rs[:-1]], rs, strict=True):
            extra_b = r["bytes"] - prev["bytes"] if prev else 0
            extra_t = r["us"] - prev["us"] if prev else 0
            lines.append(
                {
                    "shape": f"{r['K']}x{r['N']}",
                    "mb": r["bytes"] / 1e6,
                    "us": r["us"],
                    "pct_floor": r["pct_floor"],
                    "marginal_tbps": extra_b / extra_t / 1e6 if extra_t > 0 and extra_b > 0 else None,
                    "bound_pct": 100.0 * r["floor_us"] / (base["us"] + r["floor_us"]),
                }
            )
        out[method] = lines
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", type=Path)
    args = ap.parse_args()
    data = json.loads(args.json.read_text())
    print(f"copy bandwidth {data['meta']['copy_bandwidth_TBps']:.2f} TB/s; commit {data['meta']['commit']}")
    print("| method | K x N | MB | us | % floor | TB/s over the previous size | bound % (t_min + floor) |")
    print("|---|---|---|---|---|---|---|")
    for method, lines in fit(data["rows"]).items():
        for ln in lines:
            rate = "" if ln["marginal_tbps"] is None else f"{ln['marginal_tbps']:.2f}"
            print(
                f"| {method} | {ln['shape']} | {ln['mb']:.1f} | {ln['us']:.1f} | {ln['pct_floor']:.0f} "
                f"| {rate} | {ln['bound_pct']:.0f} |"
            )


if __name__ == "__main__":
    main()
