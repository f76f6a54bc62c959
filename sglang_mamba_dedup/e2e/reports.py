"""The e2e driver's reading of the plugin's status reports: which process wrote what, whether the plugin
engaged in the scheduler (layout in place, bytes saved, commits through our kernel, track slots where
required) or stayed off, and their one-line descriptions. Pure functions over the JSON files
:mod:`sglang_mamba_dedup.report` writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..env import REPORT_DIR
from ..state import COUNTERS

#: The layouts that count as "engaged": ours (back-port) or upstream's verified by us (take-over).
ENGAGED_LAYOUTS = ("ours", "upstream")


def read_reports(report_dir: str | os.PathLike | None) -> tuple[list[dict], list[str]]:
    """All ``status-<pid>.json`` reports in ``report_dir`` and the problems met reading them."""
    reports: list[dict] = []
    problems: list[str] = []
    if report_dir is None or not Path(report_dir).is_dir():
        return reports, problems
    for path in sorted(Path(report_dir).glob("status-*.json")):
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc, dict) or not isinstance(doc.get("pid"), int):
                raise ValueError("not a status report (no integer 'pid')")
            doc["_file"] = path.name
            reports.append(doc)
        except Exception as e:  # a half-written or foreign file
            problems.append(f"{path.name}: {e}")
    return reports, problems


def layout_of(report: dict) -> dict | None:
    ev = report.get("events") or {}
    lay = ev.get("dedup_layout")
    return lay if isinstance(lay, dict) else None


def _saved(lay: dict) -> int:
    try:
        return int(lay.get("dense_bytes", 0)) - int(lay.get("physical_bytes", 0))
    except (TypeError, ValueError):
        return 0


#: The commit counters of a status report (``report.count_commit``): all verify commits, those our kernel
#: served, and the same two for commits that carried a track set (SGLang saving states for the prefix cache).
def commit_counts(report: dict | None) -> dict[str, int]:
    """The four commit counters of a report (0 where missing or unreadable)."""
    ev = (report or {}).get("events") or {}
    res: dict[str, int] = {}
    for key in COUNTERS:
        try:
            res[key] = int(ev.get(key, 0) or 0)
        except (TypeError, ValueError):
            res[key] = 0
    return res


def scheduler_reports(reports: list[dict], parent_pid: int | None) -> list[dict]:
    """Reports of processes other than the driver's engine process (``parent_pid``)."""
    return [r for r in reports if parent_pid is None or r.get("pid") != parent_pid]


def expected_ranks(engine_kwargs: dict | None) -> int:
    """Scheduler processes that each build a pool and commit: one per tensor- and pipeline-parallel rank."""
    kw = engine_kwargs or {}
    return max(1, int(kw.get("tp_size") or 1)) * max(1, int(kw.get("pp_size") or 1))


def check_engaged(
    reports: list[dict], parent_pid: int | None, expect_track: bool = False, expect_ranks: int = 1
) -> tuple[bool, list[str], dict | None]:
    """Did the plugin engage in a scheduler process? Returns (engaged, reasons/evidence, report).

    Engaged means: a report written by a process other than ``parent_pid`` (the process that created
    the ``Engine``) whose pool has the dedup layout in place ("ours" or "upstream"), saves bytes
    (dense > physical), and whose commits ran through our kernels (``ours_commit_calls`` > 0); with
    ``expect_track`` also commits with track slots (``ours_track_commit_calls`` > 0). Every scheduler
    report with a pool must pass (one per TP/PP rank), and there must be ``expect_ranks`` of them: a rank whose
    scheduler wrote no report, or built its pool without the plugin, fails the check.
    """
    if not reports:
        return (
            False,
            [f"no status report was written by any process (plugin not loaded? {REPORT_DIR} not passed on?)"],
            None,
        )
    sched = scheduler_reports(reports, parent_pid)
    if not sched:
        return (
            False,
            [
                f"only the engine's own process (pid {parent_pid}) wrote a report; no scheduler "
                "process did (the plugin was not loaded there)"
            ],
            None,
        )
    with_pool = [r for r in sched if layout_of(r) is not None]
    if not with_pool:
        r = sched[0]
        return (
            False,
            [
                f"scheduler report {r.get('_file')} (mode {r.get('mode')!r}) has no dedup_layout "
                "event: the mamba pool was not built through the plugin"
            ],
            r,
        )
    reasons: list[str] = []
    if len(with_pool) < expect_ranks:
        reasons.append(
            f"only {len(with_pool)} of {expect_ranks} scheduler processes (one per TP/PP rank) reported a pool "
            f"built through the plugin (pids {sorted(str(r.get('pid')) for r in with_pool)})"
        )
    for r in with_pool:
        lay = layout_of(r) or {}
        counts = commit_counts(r)
        tag = f"pid {r.get('pid')}"
        if r.get("mode") not in ("on", "strict"):
            reasons.append(f"{tag}: mode is {r.get('mode')!r}, not on/strict")
        if lay.get("state") not in ENGAGED_LAYOUTS:
            reasons.append(
                f"{tag}: conv-window layout is {lay.get('state')!r} (reason: {lay.get('reason')}), "
                f"not one of {'/'.join(ENGAGED_LAYOUTS)}"
            )
        if _saved(lay) <= 0:
            reasons.append(
                f"{tag}: no bytes saved (dense {lay.get('dense_bytes')} B, physical {lay.get('physical_bytes')} B)"
            )
        if counts["ours_commit_calls"] <= 0:
            reasons.append(f"{tag}: no commit ran through our kernels ({counts['commit_calls']} commit calls, 0 ours)")
        elif expect_track and counts["ours_track_commit_calls"] <= 0:
            reasons.append(
                f"{tag}: no commit with track slots ran through our kernel ({counts['track_commit_calls']} "
                "commits with track slots, 0 ours; --expect-track)"
            )
    return (not reasons), reasons, with_pool[0]


def check_off(reports: list[dict], parent_pid: int | None) -> tuple[bool, list[str]]:
    """Was the "off" run really off? No scheduler report may show mode on or a commit of ours."""
    reasons = []
    for r in scheduler_reports(reports, parent_pid):
        ours = commit_counts(r)["ours_commit_calls"]
        if r.get("mode") not in (None, "off"):
            reasons.append(f"pid {r.get('pid')}: mode {r.get('mode')!r} in the off run")
        if ours > 0:
            reasons.append(f"pid {r.get('pid')}: {ours} commits through our kernels in the off run")
    return (not reasons), reasons


def describe_commits(report: dict | None) -> str:
    """One line: the commits with and without track slots, each as ours / total."""
    c = commit_counts(report)
    track, ours_track = c["track_commit_calls"], c["ours_track_commit_calls"]
    plain, ours_plain = c["commit_calls"] - track, c["ours_commit_calls"] - ours_track
    return (
        f"commits through our kernel / all: {c['ours_commit_calls']}/{c['commit_calls']}; "
        f"with track slots {ours_track}/{track}, without {ours_plain}/{plain}"
    )


def describe_report(report: dict | None) -> str:
    if report is None:
        return "no scheduler report"
    lay = layout_of(report)
    parts = [
        f"pid {report.get('pid')} ({report.get('_file')}), argv0 {report.get('argv0')!r}, "
        f"mode {report.get('mode')!r}, sglang {report.get('sglang_version')}"
    ]
    if lay is None:
        parts.append("dedup layout: none recorded")
    else:
        dense, phys = int(lay.get("dense_bytes", 0) or 0), int(lay.get("physical_bytes", 0) or 0)
        pct = f" ({100.0 * (dense - phys) / dense:.1f}%)" if dense else ""
        parts.append(
            f"dedup layout: {lay.get('state')} (reason: {lay.get('reason')}); conv-window bytes "
            f"dense {dense:,}, physical {phys:,}, saved {dense - phys:,}{pct}"
        )
    parts.append(describe_commits(report))
    ev = report.get("events") or {}
    if "zero_copy" in ev:
        parts.append(
            f"zero-copy: {ev['zero_copy']}; commits served zero-copy {ev.get('zc_commit_calls', 0)} (with a track set "
            f"{ev.get('zc_track_commits', 'not recorded')}), "
            f"stage-ins {ev.get('zc_stage_in_calls', 0)}, session states materialized {ev.get('zc_materialize_calls', 0)}"
        )
    patches = report.get("patches") or {}
    if patches:
        parts.append(
            "patches: "
            + ", ".join(
                f"{name}={(st or {}).get('state')}" + (f" ({st.get('reason')})" if (st or {}).get("reason") else "")
                for name, st in sorted(patches.items())
            )
        )
    return "\n    ".join(parts)
