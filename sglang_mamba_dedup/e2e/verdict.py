"""What an e2e call ends in: the exit codes, and the judgement of its runs (pure: no printing, no I/O).

:func:`judge_runs` (the md5 route) and :func:`judge_pairs` (``--throughput``) take the run results, their status
reports and the pairs, and return a :class:`Verdict`: the exit code, the failures in the order they were found,
and what :mod:`.console` prints about the md5s and the plugin in each run. After the runs the first code of
:data:`PRECEDENCE` that has a failure is the exit code; :data:`MEANINGS` is what ``--help`` lists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..patches import faults
from .context import RunResult
from .reports import check_engaged, check_off, commit_counts, expected_ranks, layout_of, scheduler_reports
from .workload import first_difference, output_problem

EXIT_OK = 0
EXIT_MD5_DIFFER = 1
#: argparse's own exit status; nothing else exits 2.
EXIT_USAGE = 2
EXIT_RUN_FAILED = 3
EXIT_OFF_NOT_OFF = 4
EXIT_CANNOT_RUN = 5
EXIT_FAULT_NOT_CAUGHT = 6
EXIT_NO_OUTPUT = 7
EXIT_NOT_ENGAGED = 8
EXIT_NOT_WRITTEN = 9
#: Stopped by a signal: this + the signal's number (:mod:`.cli`).
EXIT_SIGNAL_BASE = 128

#: What each exit code means, one meaning per code (``--help`` renders it: :data:`.cli.EPILOG`).
MEANINGS: dict[int, str] = {
    EXIT_OK: "the md5s are equal and the plugin engaged",
    EXIT_MD5_DIFFER: "the md5s differ",
    EXIT_USAGE: 'a usage error (one "error:" line on stderr)',
    EXIT_RUN_FAILED: "a run failed (the engine did not start, crashed or timed out; see the logs named in the "
    "last line)",
    EXIT_OFF_NOT_OFF: 'an "off" run was not off',
    EXIT_CANNOT_RUN: "cannot run here: no CUDA GPU (checked before anything is built or run)",
    EXIT_FAULT_NOT_CAUGHT: 'the negative control was not caught: a "fault" run gave run 1\'s md5',
    EXIT_NO_OUTPUT: "nothing generated: an answer without output_ids, with no token, or (ignore_eos) shorter "
    "than asked",
    EXIT_NOT_ENGAGED: 'the plugin did not engage in an "on" run (with --expect-track: also no commit with track '
    "slots through our kernel; with --zero-copy: also no commit served zero-copy)",
    EXIT_NOT_WRITTEN: "a result file asked for (--json-out, --csv-out) could not be written; the runs themselves passed",
}
#: After the runs, the first of these codes that has a failure is the exit code.
PRECEDENCE = (
    EXIT_RUN_FAILED,
    EXIT_NO_OUTPUT,
    EXIT_MD5_DIFFER,
    EXIT_NOT_ENGAGED,
    EXIT_OFF_NOT_OFF,
    EXIT_FAULT_NOT_CAUGHT,
)

#: One failure: its exit code and the text of the ``RESULT`` line.
Failure = tuple[int, str]


@dataclasses.dataclass
class Md5Check:
    """Run ``run`` (1-based, > 1) against run 1: equal token-id md5s, and where the first token differs."""

    run: int
    mode: str
    same: bool
    where: str | None  # "round 1, prompt 1, token 2"; None when equal or nowhere to point at


@dataclasses.dataclass
class PluginCheck:
    """The plugin's state in one run's scheduler, from its status reports."""

    index: int  # 0-based
    mode: str
    judged: str  # "engaged" (on, fault), "off", or "failed" (a failed run that is not "off": not judged)
    ok: bool | None
    reasons: list[str]
    scheduler: list[dict[str, Any]]  # the reports of its scheduler processes
    shown: list[dict[str, Any]]  # those worth a description (with a pool, else the first)
    report: dict[str, Any] | None  # the report the judgement rests on
    track_commits: int | None = None  # commits with track slots through our kernel, where required and engaged

    def summary(self) -> dict[str, Any]:
        """Its fields of the run's entry in the JSON summary."""
        out: dict[str, Any] = {"commit_counts": [dict(commit_counts(s), pid=s.get("pid")) for s in self.shown]}
        if self.judged == "failed":
            out.update(engaged=None, scheduler_report=self.scheduler[0] if self.scheduler else None)
        elif self.judged == "engaged":
            out.update(engaged=self.ok, engagement_reasons=self.reasons, scheduler_report=dict(self.report or {}))
        else:
            out.update(scheduler_report=self.scheduler[0] if self.scheduler else None)
        return out


@dataclasses.dataclass
class Verdict:
    code: int
    failures: list[Failure]  # in the order they were found
    compared: bool  # the md5 route compared the runs' md5s (every run went through, each generated)
    md5: list[Md5Check]  # every later run against run 1
    plugin: list[PluginCheck]  # every run whose reports were read
    fault: str = faults.COMMIT_STEP0  # the fault of the "fault" runs (--fault)

    @property
    def negative_control(self) -> list[dict[str, Any]]:
        return [{"run": c.run, "caught": not c.same} for c in self.md5 if c.mode == "fault"]


def exit_code(failures: Sequence[Failure]) -> int:
    """The first code of :data:`PRECEDENCE` among the failures; :data:`EXIT_OK` when there is none."""
    return next((c for c in PRECEDENCE if any(f[0] == c for f in failures)), EXIT_OK)


def judge_runs(
    results: Sequence[RunResult],
    spec: Mapping[str, Any],
    planned: Sequence[str],
    *,
    track_expected: bool,
    no_reports: bool,
    verbose: bool = False,
    fault: str = faults.COMMIT_STEP0,
    zero_copy: bool = False,
    zero_copy_radix: bool = False,
) -> Verdict:
    """The md5 route: every run went through, then run 1 against every later run, then the plugin (``fault``: the
    fault of the "fault" runs; ``zero_copy``: the "on" and "fault" runs must show the zero-copy commit;
    ``zero_copy_radix``: with the radix cache on, also commits with a track set served zero-copy, and every run's
    round 2 must have read cached prompt tokens back, :func:`cached_problems`, except in streaming sessions)."""
    failures: list[Failure] = []
    checks: list[Md5Check] = []
    compared = False
    if any(not r.ok for r in results):
        failures.append((EXIT_RUN_FAILED, failed_runs_text(results, verbose)))
    elif problems := output_problems(results, spec):
        failures.append((EXIT_NO_OUTPUT, "nothing generated, nothing compared: " + "; ".join(problems)))
    elif results:
        compared = True
        checks = _md5_checks(results, len(spec["prompts"]))
        failures += _md5_failures(results, checks, fault)
        if zero_copy and zero_copy_radix and not spec.get("streaming_sessions"):
            # a streaming session's round 2 continues from the state the session kept, not from the tree
            failures += [(EXIT_NOT_ENGAGED, p) for p in cached_problems(results)]
    return _with_plugin(
        results,
        failures,
        compared,
        checks,
        planned,
        spec,
        track_expected,
        no_reports,
        fault,
        zero_copy,
        zero_copy_radix,
    )


def judge_pairs(
    results: Sequence[RunResult],
    data: Mapping[str, Any] | None,
    spec: Mapping[str, Any],
    *,
    track_expected: bool,
    no_reports: bool,
    verbose: bool = False,
    zero_copy: bool = False,
    zero_copy_radix: bool = False,
) -> Verdict:
    """``--throughput``: both servers went through, the pairs (:func:`.paired.run_pairs`), then the plugin."""
    failures: list[Failure] = []
    if data is None or any(not r.ok for r in results):
        failures.append((EXIT_RUN_FAILED, failed_runs_text(results, verbose)))
    else:
        if data["no_output"]:
            n = len(data["no_output"])
            failures.append(
                (EXIT_NO_OUTPUT, f"nothing generated in {n} requests, nothing compared: {data['no_output'][0]}")
            )
        if not any(not p["first"] for p in data["pairs"]):
            failures.append((EXIT_RUN_FAILED, "no timed pair ran (--time-budget): nothing was measured"))
        if data["mismatches"]:
            n = len(data["mismatches"])
            failures.append((EXIT_MD5_DIFFER, f"{n} requests differ: {data['mismatches'][0]}"))
    return _with_plugin(
        results,
        failures,
        False,
        [],
        ("off", "on"),
        spec,
        track_expected,
        no_reports,
        faults.COMMIT_STEP0,
        zero_copy,
        zero_copy_radix,
    )


def _with_plugin(
    results: Sequence[RunResult],
    failures: list[Failure],
    compared: bool,
    checks: list[Md5Check],
    planned: Sequence[str],
    spec: Mapping[str, Any],
    track_expected: bool,
    no_reports: bool,
    fault: str,
    zero_copy: bool,
    zero_copy_radix: bool = False,
) -> Verdict:
    ranks = expected_ranks(spec.get("engine_kwargs"))
    sessions = bool(spec.get("streaming_sessions"))
    plugin = (
        [] if no_reports else plugin_checks(results, track_expected, ranks, fault, zero_copy, sessions, zero_copy_radix)
    )
    for c in plugin:
        if c.ok is False and c.judged == "engaged":
            failures.append((EXIT_NOT_ENGAGED, "plugin not engaged: " + "; ".join(c.reasons)))
        elif c.ok is False:
            failures.append((EXIT_OFF_NOT_OFF, "the off run was not off: " + "; ".join(c.reasons)))
    if "on" in planned and not any(r.mode == "on" for r in results):
        failures.append((EXIT_RUN_FAILED, "no 'on' run was started (--time-budget): nothing shows the plugin"))
    if "fault" in planned and not any(r.mode == "fault" for r in results):
        no_fault = "no 'fault' run was started (--time-budget): nothing shows the check sees a broken commit"
        failures.append((EXIT_RUN_FAILED, no_fault))
    return Verdict(exit_code(failures), failures, compared, checks, plugin, fault)


def _md5_checks(results: Sequence[RunResult], n_prompts: int) -> list[Md5Check]:
    base = results[0]
    checks = []
    for k, r in enumerate(results[1:], start=2):
        same = _stat(base, "ids_md5") == _stat(r, "ids_md5")
        d = None if same else first_difference(all_outputs(base), all_outputs(r))
        checks.append(Md5Check(k, r.mode, same, f"{where(d[0], n_prompts)}, token {d[1]}" if d else None))
    return checks


def _md5_failures(results: Sequence[RunResult], checks: Sequence[Md5Check], fault: str) -> list[Failure]:
    base = results[0]
    failures: list[Failure] = []
    for c in checks:
        if c.mode == "fault":
            if c.same:
                failures.append((EXIT_FAULT_NOT_CAUGHT, negative_control_text(c, fault)))
        elif not c.same:
            at = f"md5 differ (run 1 {base.mode} vs run {c.run} {c.mode}); first difference at {c.where}"
            failures.append((EXIT_MD5_DIFFER, at if c.where else "md5 differ"))
        elif _stat(base, "text_md5") != _stat(results[c.run - 1], "text_md5"):
            failures.append((EXIT_MD5_DIFFER, f"token ids equal but texts differ (run 1 vs run {c.run})"))
    return failures


def negative_control_text(c: Md5Check, fault: str) -> str:
    return (
        f"negative control NOT caught: run {c.run} (fault {fault}: {faults.FAULTS[fault].breaks}) gave run 1's md5; "
        "this md5 check cannot see a broken commit"
    )


def plugin_checks(
    results: Sequence[RunResult],
    track_expected: bool,
    expect_ranks: int = 1,
    fault: str = faults.COMMIT_STEP0,
    zero_copy: bool = False,
    sessions: bool = False,
    radix: bool = False,
) -> list[PluginCheck]:
    """Per run: an "on" or "fault" run engaged (a fault run also shows ``fault`` installed; with ``zero_copy`` both
    show the zero-copy commit serving commits, and with ``sessions`` kept states materialized), an "off" run
    stayed off; a failed run that is not "off" is not judged (a missing or partial report says nothing there)."""
    out = []
    for i, r in enumerate(results):
        sched = scheduler_reports(r.reports, r.pid)
        shown = [s for s in sched if layout_of(s) is not None] or sched[:1]
        if r.mode != "off" and not r.ok:
            out.append(PluginCheck(i, r.mode, "failed", None, [], sched, shown, None))
        elif r.mode in ("on", "fault"):
            _, reasons, rep = check_engaged(r.reports, r.pid, expect_track=track_expected, expect_ranks=expect_ranks)
            if r.mode == "fault" and not any((s.get("events") or {}).get("fault") == fault for s in sched):
                reasons = [*reasons, f"no scheduler report shows the fault {fault} installed"]
            if zero_copy:
                reasons = [*reasons, *zero_copy_problems([*sched, *server_state_reports(r)], sessions, radix)]
            ok = not reasons
            track = None
            if ok and track_expected:
                track = min(commit_counts(s)["ours_track_commit_calls"] for s in shown)
            out.append(PluginCheck(i, r.mode, "engaged", ok, reasons, sched, shown, rep, track))
        else:
            ok, reasons = check_off(r.reports, r.pid)
            out.append(PluginCheck(i, r.mode, "off", ok, reasons, sched, shown, sched[0] if sched else None))
    return out


def server_state_reports(r: RunResult) -> list[dict[str, Any]]:
    """A run's ``server_state`` (each scheduler's entry read back after the workload, exact where a report file
    may lag: reports are rewritten at power-of-two commits) as report-shaped ``{"events": ...}`` for the
    zero-copy check."""
    out = []
    for st in r.server_state or []:
        zc = st.get("zero_copy") if isinstance(st, Mapping) else None
        if isinstance(zc, Mapping):
            out.append(
                {"events": {"zero_copy": zc.get("decision"), **{k: v for k, v in zc.items() if k != "decision"}}}
            )
    return out


def _count(value: Any) -> int:
    """A count as reported (a whole number), else 0: a bool, a float or a string counts nothing."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def zero_copy_problems(sched: Sequence[Mapping[str, Any]], sessions: bool = False, radix: bool = False) -> list[str]:
    """Why no scheduler report shows the zero-copy commit on (``events.zero_copy``) and serving commits
    (``events.zc_commit_calls`` > 0), with ``sessions`` (streaming sessions ran) states the sessions kept
    materialized (``events.zc_materialize_calls`` > 0), and with ``radix`` (the radix cache on) commits with a
    track set served zero-copy (``events.zc_track_commits`` > 0: a counter not recorded fails too); empty when
    one does. A gate that refused zero-copy (``off: <reason>``) fails with its refusal line. ``sched``: report
    files and :func:`server_state_reports` alike."""
    events = [s.get("events") or {} for s in sched]
    on = [e for e in events if e.get("zero_copy") == "on"]
    if not on:
        seen = "; ".join(dict.fromkeys(str(e.get("zero_copy", "not recorded")) for e in events)) or "no report"
        refused = [str(d) for e in events if isinstance(d := e.get("zero_copy"), str) and d.startswith("off")]
        if refused:
            return [f"the gate refused zero-copy: {'; '.join(dict.fromkeys(refused))}"]
        return [f"zero-copy asked for but no scheduler report shows it on (events.zero_copy: {seen})"]
    needed = [("zc_commit_calls", "zero-copy on but no commit was served zero-copy")]
    said = [e["radix_cache"] for e in on if "radix_cache" in e]  # the server's own word (server_state only)
    if radix and said and not any(said):
        return ["zero-copy on, but its pools say they serve with the radix cache off (zero_copy.radix_cache: None)"]
    if radix:
        needed.append(
            (
                "zc_track_commits",
                "zero-copy on with the radix cache but no commit with a track set was served zero-copy",
            )
        )
        if any("zc_track_rows" in e for e in on):  # where the count reached the reports read (the Engine route's
            # server_state; a report file has it only once counted, so a server run is not judged by it)
            needed.append(
                ("zc_track_rows", "zero-copy on with the radix cache but no request crossed a track boundary")
            )
    if sessions:
        needed.append(("zc_materialize_calls", "streaming sessions ran but no kept state was materialized"))
    for key, problem in needed:
        if not any(_count(e.get(key)) > 0 for e in on):
            counts = ", ".join(str(e.get(key, "not recorded")) for e in on)
            return [f"{problem} (events.{key}: {counts})"]
    return []


def cached_problems(results: Sequence[RunResult]) -> list[str]:
    """Per run, why its round 2 proves nothing about states read back from the radix cache: SGLang's
    ``cached_tokens`` (meta_info) of round 2 not reported, or 0 (R3 of the radix zero-copy review: round 2 extends
    the whole round-1 text, so it must read decode-tracked states back)."""
    problems = []
    for k, r in enumerate(results, start=1):
        rounds = (r.stats or {}).get("rounds") or []
        cached = rounds[1].get("cached_tokens") if len(rounds) > 1 else None
        if not _count(cached) > 0:
            what = "not reported" if cached is None else str(cached)
            problems.append(
                f"run {k} ({r.mode}): round 2 read no prompt tokens from the radix cache (cached_tokens {what}): "
                "no state tracked in round 1 was read back"
            )
            continue
        per = (r.stats or {}).get("decode_tracked")
        if isinstance(per, Mapping):  # per request: a request whose state the tree evicted does not hide the others
            if not per.get("requests"):
                problems.append(
                    f"run {k} ({r.mode}): round 2 read {cached} cached tokens, but none of its {per.get('of')} "
                    "requests more than its own round-1 prompt: only prefill states were read back, none tracked in "
                    "round 1's decode (lower --mamba-track-interval or raise --max-new-tokens)"
                )
            continue
        beyond = decode_tracked_tokens(rounds)
        if beyond is not None and beyond <= 0:
            problems.append(
                f"run {k} ({r.mode}): round 2 read {cached} cached tokens, not more than round 1's "
                f"{rounds[0].get('prompt_tokens')} prompt tokens: only prefill states were read back, none tracked "
                "in round 1's decode (lower --mamba-track-interval or raise --max-new-tokens)"
            )
    return problems


def decode_tracked_tokens(rounds: Sequence[Mapping[str, Any]]) -> int | None:
    """Round totals, where the per-request count (``stats.decode_tracked``, preferred) is not there: how many of
    round 2's cached tokens lie beyond round 1's prompts (None where not both reported): round 2
    extends each whole round-1 text, and a request's prefix states from its round-1 prefill reach its round-1 prompt
    at most, so a positive count means states tracked during round 1's decode were read back (at least that many
    tokens' worth). R3 of the radix zero-copy review; issue 50 item 4's "say how many"."""
    if len(rounds) < 2:
        return None
    cached, prompt = rounds[1].get("cached_tokens"), rounds[0].get("prompt_tokens")
    if (
        not isinstance(cached, int)
        or not isinstance(prompt, int)
        or isinstance(cached, bool)
        or isinstance(prompt, bool)
    ):
        return None
    return cached - prompt


def output_problems(results: Sequence[RunResult], spec: Mapping[str, Any]) -> list[str]:
    """Per run that went through, the first round whose outputs :func:`.workload.output_problem` refuses."""
    sampling = spec["sampling_params"]
    want = sampling["max_new_tokens"] if sampling.get("ignore_eos") else None
    problems = []
    for k, r in enumerate(results, start=1):
        found = (
            f"round {i + 1}: {p}" for i, part in enumerate(r.rounds) if (p := output_problem(part["outputs"], want))
        )
        problem = next(found, None)
        if problem:
            problems.append(f"run {k} ({r.mode}) {problem}")
    return problems


def failed_runs_text(results: Sequence[RunResult], verbose: bool) -> str:
    """The failure line of runs that failed: what failed and where its log is, no guess at the cause."""
    unfinished = [(i, r) for i, r in enumerate(results) if not r.ok]
    # a run without an error of its own was stopped because another failed (a server of --throughput)
    failed = [(i, r) for i, r in unfinished if r.error] or unfinished
    stopped = "".join(f"; run {i + 1} ({r.mode}) stopped with it" for i, r in unfinished if (i, r) not in failed)
    errors = "; ".join(dict.fromkeys(str(r.error) for _, r in failed))
    logs = [r.log for _, r in failed if r.log]  # a server never started has none
    at = (
        "see the engine output above (--verbose)"
        if verbose
        else (f"see {'its log' if len(logs) == 1 else 'the logs'}: " + ", ".join(logs))
    )
    if len(failed) == len(results):
        return f"all {len(results)} runs failed ({errors}), nothing was compared; {at}"
    names = ", ".join(f"run {i + 1} ({r.mode})" for i, r in failed)
    return f"{names} failed ({errors}){stopped}, nothing was compared; {at}"


def all_outputs(r: RunResult) -> list[list[int]]:
    """The output token ids of every request of a run, round 1 then round 2."""
    return [o["output_ids"] for part in r.rounds for o in part.get("outputs") or []]


def where(index: int, round1_size: int) -> str:
    return f"round 1, prompt {index}" if index < round1_size else f"round 2, prompt {index - round1_size}"


def _stat(r: RunResult, key: str) -> Any:
    return (r.stats or {}).get(key)
