"""Plot a CUDA benchmark JSON of bench/bench_cuda.py: per layer shape, speedup over torch fp16
(time(torch fp16) / time(method), log-log over M) for every timed method, with the 1x line.

    python bench/plot_cuda.py bench/results/2026-11-22-h100-s6-final-bench-cuda.json

Writes <json stem>.png beside the JSON (needs matplotlib; bench_cuda.py calls this when it is
installed, else run it where it is)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

BASELINE = "torch_fp16"


class NoBaselineError(ValueError):
    """The run timed no torch fp16 rows, so there is no speedup to plot."""


def plot(json_path: Path) -> Path:
    """Writes the plot; NoBaselineError when the run has no torch fp16 rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(json_path.read_text())
    rows = [r for r in data["rows"] if "us" in r]  # failed (shape, method, M) have no time
    shapes = sorted({(r["K"], r["N"]) for r in rows})
    methods = [m for m in dict.fromkeys(r["method"] for r in rows) if m != BASELINE]
    base = {(r["K"], r["N"], r["M"]): r["us"] for r in rows if r["method"] == BASELINE}
    if not base:
        raise NoBaselineError(f"{json_path}: no {BASELINE} rows to compare with")

    fig, axes = plt.subplots(1, len(shapes), figsize=(4.2 * len(shapes), 3.8), sharey=True, squeeze=False)
    for ax, (k, n) in zip(axes[0], shapes, strict=True):
        for method in methods:
            pts = sorted(
                (r["M"], base[(k, n, r["M"])] / r["us"])
                for r in rows
                if r["method"] == method and (r["K"], r["N"]) == (k, n) and (k, n, r["M"]) in base
            )
            if pts:
                ax.plot([m for m, _ in pts], [s for _, s in pts], marker="o", ms=3, label=method)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_title(f"K={k}, N={n}", fontsize=10)
        ax.set_xlabel("M (tokens)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel(f"speedup over {BASELINE}")
    axes[0][-1].legend(fontsize=7, loc="best")
    meta = data.get("meta", {})
    title = f"{meta.get('device', '')}, commit {meta.get('commit', '')}: per layer, ORT CUDA graphs"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = json_path.with_suffix(".png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", type=Path, nargs="+")
    for path in ap.parse_args().json:
        try:
            print(plot(path))
        except NoBaselineError as e:
            raise SystemExit(str(e)) from None


if __name__ == "__main__":
    main()
