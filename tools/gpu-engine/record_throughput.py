"""The results of ``run_throughput.sh`` (``e2e --server --throughput``, one summary per variant) in the project's
forms: ``<out>/summaries.json`` (the e2e summaries by variant), ``<out>/throughput.md`` (one Markdown table of all
variants) and one row per variant and phase through the benchmarks' :class:`Recorder` (``_timing.py``):
``<out>/latest/e2e_pairs-<gpu>.csv`` and ``<out>/history.csv``. Test infrastructure, not part of the package.

    python3 -P tools/gpu-engine/record_throughput.py OUT VARIANT=SUMMARY.json [VARIANT=SUMMARY.json ...]

A summary that is missing (the e2e failed before writing it) is named in the table and left out of the CSV.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # _timing, also under python -P

from _timing import Recorder  # noqa: E402

from sglang_mamba_dedup.e2e.stats import fmt_rate, fmt_ratio  # noqa: E402

PHASES = ("batch1", "full")


def _commits(summary: dict, mode: str) -> tuple[int | None, int | None]:
    """(ours, all) commits of the ``mode`` server's scheduler report, None where there is none."""
    for run in summary.get("runs") or []:
        if run.get("mode") == mode and run.get("commit_counts"):
            c = run["commit_counts"][0]
            return c.get("ours_commit_calls"), c.get("commit_calls")
    return None, None


def rows_of(variant: str, summary: dict) -> list[dict]:
    """One row per phase with timed pairs: the ratio and each mode's tok/s (median, min, max), the verdict, the
    first request of each mode, md5 equality and the commits through our kernel per server."""
    tp = summary.get("throughput") or {}
    rows = []
    ours_on, all_on = _commits(summary, "on")
    ours_off, all_off = _commits(summary, "off")
    for phase in PHASES:
        st = (tp.get("stats") or {}).get(phase)
        pairs = [p for p in tp.get("pairs") or [] if p["phase"] == phase]
        if not st or not st.get("ratio"):
            continue
        first = next((p for p in pairs if p["first"]), None)
        md5s = {p[m]["ids_md5"] for p in pairs for m in ("off", "on")}
        row = {
            "variant": variant,
            "phase": phase,
            "workload": (tp.get("labels") or {}).get(phase, phase),
            "pairs": st["ratio"]["runs"],
        }
        for key in ("ratio", "off", "on"):
            name = "on_off" if key == "ratio" else f"{key}_tok_s"
            for q in ("median", "min", "max"):
                row[f"{name}_{q}"] = round(st[key][q], 5 if key == "ratio" else 2)
        row.update(
            verdict=st["verdict"],
            first_off_tok_s=round(first["off"]["tokens_per_s"], 2) if first else "",
            first_on_tok_s=round(first["on"]["tokens_per_s"], 2) if first else "",
            md5_equal=int(len(md5s) == 1),
            ids_md5=next(iter(md5s)) if len(md5s) == 1 else "",
            on_commits_ours=ours_on,
            on_commits_all=all_on,
            off_commits_ours=ours_off,
            off_commits_all=all_off,
            not_started=len(tp.get("not_started") or []),
            exit_code=summary.get("exit_code"),
            settings=summary.get("settings"),
        )
        rows.append(row)
    return rows


def table(rows: list[dict], missing: list[str]) -> list[str]:
    lines = [
        "| variant | phase | pairs | on/off median (min - max) | off tok/s median (min - max) "
        "| on tok/s median (min - max) | verdict | first request off / on tok/s | md5 off = on "
        "| commits through our kernel, on server (ours/all) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['workload']} | {r['pairs']} | {fmt_ratio(r['on_off_median'])} "
            f"({fmt_ratio(r['on_off_min'])} - {fmt_ratio(r['on_off_max'])}) | {fmt_rate(r['off_tok_s_median'])} "
            f"({fmt_rate(r['off_tok_s_min'])} - {fmt_rate(r['off_tok_s_max'])}) | {fmt_rate(r['on_tok_s_median'])} "
            f"({fmt_rate(r['on_tok_s_min'])} - {fmt_rate(r['on_tok_s_max'])}) | {r['verdict']} "
            f"| {fmt_rate(r['first_off_tok_s'] or None)} / {fmt_rate(r['first_on_tok_s'] or None)} "
            f"| {'yes' if r['md5_equal'] else 'NO'} | {r['on_commits_ours']}/{r['on_commits_all']} |"
        )
    lines += [f"| {v} | no summary (the e2e failed before writing it; see throughput.txt) |" for v in missing]
    return lines


def main(argv: list[str]) -> int:
    if len(argv) < 2 or any("=" not in a for a in argv[1:]):
        print("usage: record_throughput.py OUT VARIANT=SUMMARY.json [...]", file=sys.stderr)
        return 2
    out = Path(argv[0])
    summaries, missing, rows = {}, [], []
    for item in argv[1:]:
        variant, _, path = item.partition("=")
        try:
            summaries[variant] = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            missing.append(variant)
            continue
        rows += rows_of(variant, summaries[variant])
    (out / "summaries.json").write_text(json.dumps(summaries, indent=1, default=str))
    lines = table(rows, missing)
    (out / "throughput.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if rows:
        gpu = next((s.get("gpu") or {} for s in summaries.values()), {})
        path = Recorder(out, "e2e_pairs", device="cuda" if gpu.get("name") else "cpu").write(rows)
        print(f"rows: {path} and {out / 'history.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
