"""The e2e driver's statistics (pure): a run's tokens, rates, cached tokens and md5s (:func:`run_stats`); for two
servers side by side (``--throughput``, :mod:`.paired`) the pair order (A B, B A, ...), the schedule of the pairs,
and the per-pair on/off ratios with their median and min-max."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from .workload import md5_of_ids, md5_of_texts

#: Fewer timed pairs of a phase than this: the table shows medians and ranges but compares nothing.
MIN_PAIRS_TO_COMPARE = 3


def spread(values: Sequence[float | None]) -> dict[str, Any] | None:
    """``{"runs", "median", "min", "max"}`` of the values that are not None (None when there are none).
    The median of an even count is the mean of the two middle values."""
    vals = sorted(float(v) for v in values if v is not None)
    if not vals:
        return None
    return {"runs": len(vals), "median": statistics.median(vals), "min": vals[0], "max": vals[-1]}


def fmt_rate(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.1f}"


# ----------------------------------------------------------------------------- summary of a run
def part_stats(part: Mapping[str, Any]) -> dict[str, Any]:
    """Tokens, time and rate of one round or phase; prompt and cached tokens where SGLang reported them."""
    outs = part.get("outputs") or []
    meta = part.get("meta") or [{} for _ in outs]
    completion = sum(int(m.get("completion_tokens") or 0) for m in meta) or sum(len(o["output_ids"]) for o in outs)
    secs = float(part.get("seconds") or 0.0)

    def total(key: str) -> int | None:
        vals = [m.get(key) for m in meta]
        return sum(int(v) for v in vals) if vals and all(v is not None for v in vals) else None

    return {
        "requests": len(outs),
        "completion_tokens": completion,
        "seconds": secs,
        "tokens_per_s": completion / secs if secs > 0 else None,
        "prompt_tokens": total("prompt_tokens"),
        "cached_tokens": total("cached_tokens"),
        "ids_md5": md5_of_ids([o["output_ids"] for o in outs]),
    }


def decode_tracked(rounds: Sequence[Mapping[str, Any]]) -> dict[str, int] | None:
    """Per request, round 2 against round 1 (round-2 request ``j`` extends round-1 request ``j``'s whole text):
    ``requests`` whose round-2 cached tokens exceed their own round-1 prompt tokens, and ``tokens``, the cached
    tokens beyond those prompts summed over them, of ``of`` requests. A request's prefill states reach its prompt at
    most, so each such request read a state tracked in round 1's decode back. Judged per request: a run whose tree
    evicted some requests' states (the pressure proofs) still shows the others'. None where SGLang did not report
    both counts for every request, or the rounds do not pair up."""
    if len(rounds) < 2:
        return None
    first, second = (list(r.get("meta") or []) for r in rounds[:2])
    if not first or len(first) != len(second):
        return None
    pairs = [(m2.get("cached_tokens"), m1.get("prompt_tokens")) for m1, m2 in zip(first, second)]
    if not all(type(c) is int and type(p) is int for c, p in pairs):
        return None
    beyond = [c - p for c, p in pairs if c > p]
    return {"requests": len(beyond), "tokens": sum(beyond), "of": len(pairs)}


def run_stats(res: dict[str, Any]) -> dict[str, Any]:
    """The summary of one run's result (:func:`.workload.run_plan`'s fields): per round and in all. ``batch1`` is
    always None (the separate-run timing of a batch-1 request is gone; the key stays for the summary's readers)."""
    rounds = res.get("rounds") or []
    outs = [o for r in rounds for o in (r.get("outputs") or [])]
    meta = [m for r in rounds for m in (r.get("meta") or [{} for _ in (r.get("outputs") or [])])]
    per_round = [part_stats(r) for r in rounds]
    completion = sum(r["completion_tokens"] for r in per_round)
    verify = sum(int(m.get("spec_verify_ct") or 0) for m in meta)
    hist: list[int] = []
    for m in meta:
        for i, v in enumerate(m.get("spec_correct_drafts_histogram") or []):
            if i >= len(hist):
                hist.extend([0] * (i + 1 - len(hist)))
            hist[i] += int(v)
    return {
        "rounds": per_round,
        "decode_tracked": decode_tracked(rounds),
        "completion_tokens": completion,
        "verify_steps": verify,
        "accept_length": completion / verify if verify else None,
        "accepted_drafts_histogram": hist or None,
        "ids_md5": md5_of_ids([o["output_ids"] for o in outs]),
        "text_md5": md5_of_texts([o.get("text") for o in outs]),
        "batch1": None,
        "cache_flushes": res.get("cache_flushes"),
    }


# ----------------------------------------------------------------------------- paired servers (--throughput)
def pair_order(k: int) -> tuple[str, str]:
    """The order of pair ``k`` (0-based) of a phase: A B, then B A, ... (off first in even pairs), so a drift in
    time (clocks, temperature, caches) weighs on both modes alike."""
    return ("off", "on") if k % 2 == 0 else ("on", "off")


def pair_schedule(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    """The pairs of every phase as ``(phase, k)``, in the order they run: first pair 0 of each phase (the first
    request of each mode after the warm-up, reported apart), then the timed pairs 1..N of the phases
    interleaved in proportion, so that a time budget that ends the run early cuts every phase alike."""
    plan = [(phase, 0) for phase, n in counts.items() if n > 0]
    done = {phase: 0 for phase in counts}
    while True:
        left = [p for p, n in counts.items() if done[p] < n]
        if not left:
            return plan
        phase = min(left, key=lambda p: ((done[p] + 1) / counts[p], list(counts).index(p)))
        done[phase] += 1
        plan.append((phase, done[phase]))


def pair_stats(pairs: Sequence[Mapping[str, float | None]], min_pairs: int = MIN_PAIRS_TO_COMPARE) -> dict[str, Any]:
    """The statistics of one phase's timed pairs (``{"off": tok/s, "on": tok/s}`` each): the per-pair ratio
    on/off (> 1: on faster), its median and min-max, and each mode's :func:`spread` of tok/s.

    ``verdict``: "within noise" when the ratio range includes 1, "on faster" / "on slower" when it does not,
    "not compared" below ``min_pairs`` pairs.
    """
    ratios = [float(on) / float(off) for p in pairs if (on := p.get("on")) and (off := p.get("off"))]
    res: dict[str, Any] = {
        "ratio": spread(ratios),
        "off": spread([p.get("off") for p in pairs]),
        "on": spread([p.get("on") for p in pairs]),
    }
    r = res["ratio"]
    if r is None or r["runs"] < min_pairs:
        res["verdict"] = "not compared"
        res["text"] = f"not compared: {0 if r is None else r['runs']} pairs ({min_pairs} needed)"
    elif r["min"] <= 1.0 <= r["max"]:
        res["verdict"] = "within noise"
        res["text"] = "within noise: the on/off range includes 1"
    else:
        res["verdict"] = "on faster" if r["min"] > 1.0 else "on slower"
        res["text"] = f"{res['verdict']} in every pair"
    return res


def pair_table(stats: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str]) -> list[str]:
    """The per-phase :func:`pair_stats` as a Markdown table."""

    def cell(s: Mapping[str, Any] | None, fmt: Any = fmt_rate) -> str:
        return "n/a" if not s else f"{fmt(s['median'])} ({fmt(s['min'])} - {fmt(s['max'])})"

    lines = [
        "| phase | pairs | on/off median (min - max) | off tok/s median (min - max) "
        "| on tok/s median (min - max) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for phase, st in stats.items():
        n = st["ratio"]["runs"] if st.get("ratio") else 0
        lines.append(
            f"| {labels.get(phase, phase)} | {n} | {cell(st.get('ratio'), fmt_ratio)} | {cell(st.get('off'))} "
            f"| {cell(st.get('on'))} | {st['text']} |"
        )
    return lines


def fmt_ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"
