"""The e2e driver's throughput statistics (pure): the run schedule (a throwaway start, then alternating
modes), per-mode median and min-max, and the off/on comparison that says "within noise" when the ranges
overlap. No single-run ratios."""

from __future__ import annotations

import statistics
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

#: Fewer runs per mode than this: the throughput table shows medians and ranges but compares nothing.
MIN_RUNS_TO_COMPARE = 3
#: The throughput phases of a run: batch 1 (one request of --batch1-tokens) and the full batch (round 1).
PHASES = ("batch1", "full")


def spread(values: Sequence[Optional[float]]) -> Optional[Dict[str, Any]]:
    """``{"runs", "median", "min", "max"}`` of the values that are not None (None when there are none).
    The median of an even count is the mean of the two middle values."""
    vals = sorted(float(v) for v in values if v is not None)
    if not vals:
        return None
    return {"runs": len(vals), "median": statistics.median(vals), "min": vals[0], "max": vals[-1]}


def compare_spreads(
    off: Optional[Mapping[str, Any]], on: Optional[Mapping[str, Any]], min_runs: int = MIN_RUNS_TO_COMPARE
) -> Dict[str, Any]:
    """Off vs on for one phase: "within noise" when the min-max ranges overlap, else which mode is faster
    (higher tok/s) and by how much, median vs median. Fewer than ``min_runs`` runs in a mode: not compared.

    Returns ``{"verdict": "not compared" | "within noise" | "on faster" | "off faster", "overlap",
    "median_change_pct" (on vs off, %), "text"}``.
    """
    if not off or not on:
        return {"verdict": "not compared", "overlap": None, "median_change_pct": None, "text": "not compared: no runs"}
    if off["runs"] < min_runs or on["runs"] < min_runs:
        return {
            "verdict": "not compared",
            "overlap": None,
            "median_change_pct": None,
            "text": f"not compared: {off['runs']} off / {on['runs']} on runs ({min_runs} per mode needed)",
        }
    change = 100.0 * (on["median"] / off["median"] - 1.0) if off["median"] > 0 else None
    overlap = max(off["min"], on["min"]) <= min(off["max"], on["max"])
    if overlap:
        verdict = "within noise"
        text = "within noise: the off and on ranges overlap" + (
            f" (medians: on {change:+.1f}% vs off)" if change is not None else ""
        )
    else:
        faster, slower = ("on", off) if on["median"] > off["median"] else ("off", on)
        quick = on if faster == "on" else off
        pct = 100.0 * (quick["median"] / slower["median"] - 1.0) if slower["median"] > 0 else float("inf")
        verdict = f"{faster} faster"
        text = (
            f"{faster} faster: median {pct:.1f}% above {'off' if faster == 'on' else 'on'} (the ranges do not overlap)"
        )
    return {"verdict": verdict, "overlap": overlap, "median_change_pct": change, "text": text}


def throughput_stats(
    samples: Sequence[Tuple[str, Mapping[str, Optional[float]]]], phases: Sequence[str] = PHASES
) -> Dict[str, Dict[str, Any]]:
    """Per phase: the :func:`spread` of each mode's tok/s and their :func:`compare_spreads`.
    ``samples``: ``(mode, {phase: tok/s})`` of every timed run (throwaway runs left out by the caller)."""
    res: Dict[str, Dict[str, Any]] = {}
    for phase in phases:
        off = spread([s.get(phase) for m, s in samples if m == "off"])
        on = spread([s.get(phase) for m, s in samples if m == "on"])
        res[phase] = {"off": off, "on": on, "comparison": compare_spreads(off, on)}
    return res


def throughput_table(stats: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str]) -> List[str]:
    """The stats of :func:`throughput_stats` as a Markdown table (one line per phase)."""

    def cell(s: Optional[Mapping[str, Any]]) -> str:
        if not s:
            return "n/a"
        return f"{_fmt_rate(s['median'])} ({_fmt_rate(s['min'])} - {_fmt_rate(s['max'])}, {s['runs']} runs)"

    lines = [
        "| phase | off: median tok/s (min - max, runs) | on: median tok/s (min - max, runs) | off vs on |",
        "|---|---|---|---|",
    ]
    for phase, st in stats.items():
        lines.append(
            f"| {labels.get(phase, phase)} | {cell(st.get('off'))} | {cell(st.get('on'))} | "
            f"{st['comparison']['text']} |"
        )
    return lines


def _fmt_rate(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:,.1f}"


def run_schedule(
    modes: Optional[Sequence[str]], throughput_runs: int = 0, throwaway: bool = True
) -> List[Tuple[str, bool]]:
    """The runs, in order, as ``(mode, throwaway)``: ``modes`` (default off,on), or with ``throughput_runs``
    N one throwaway "off" start (unless ``throwaway`` is False) and N x (off, on)."""
    if throughput_runs > 0:
        plan = [("off", True)] if throwaway else []
        return plan + [(m, False) for _ in range(throughput_runs) for m in ("off", "on")]
    return [(m, False) for m in (modes or ["off", "on"])]
