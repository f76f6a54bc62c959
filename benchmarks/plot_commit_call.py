#!/usr/bin/env python3
"""Plot the whole-call commit benchmark: ``latest/commit_call-<label>-<gpu>.csv`` files of ``bench_commit_call.py``.

One panel per model: the whole call in µs against the batch, SGLang's path and the plugin's, accept only and
accept + track (D=4 rows when the CSVs hold several D), log-log. Rows of other benchmarks (``history.csv``
holds them all) are left out. Needs matplotlib (not a dependency).

    cd benchmarks/results/latest && python ../../plot_commit_call.py commit_call-qwen35-nvidia-h200.csv \
        commit_call-qwen3next-nvidia-h200.csv --out commit_call-nvidia-h200.png
"""

from __future__ import annotations

import argparse
import csv
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--draft-tokens", type=int, default=4)
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = []
    for path in args.csv:
        with open(path) as f:
            rows.extend(csv.DictReader(f))
    rows = [r for r in rows if r.get("benchmark", "commit_call") == "commit_call"]
    rows = [r for r in rows if int(r.get("D", args.draft_tokens)) == args.draft_tokens]
    models = sorted({r.get("model", "qwen3.5-0.8b") for r in rows})
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.2), squeeze=False)
    for ax, model in zip(axes[0], models):
        for track in ("False", "True"):
            sel = sorted(
                (r for r in rows if r.get("model", "qwen3.5-0.8b") == model and r["track"] == track),
                key=lambda r: int(r["batch"]),
            )
            if not sel:
                continue
            b = [int(r["batch"]) for r in sel]
            what = "accept + track" if track == "True" else "accept"
            ax.plot(b, [float(r["sglang_us"]) for r in sel], "o--", label=f"SGLang, {what}")
            ax.plot(b, [float(r["ours_us"]) for r in sel], "s-", label=f"plugin, {what}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch (requests)")
        ax.set_ylabel("whole commit call, µs (CUDA events)")
        ax.set_title(f"{model}, D={args.draft_tokens}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
