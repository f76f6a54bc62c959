"""The e2e's judgement, called directly (no printing): run results and status reports in, the exit code and the
failures out, for every code after the runs and their precedence."""

import itertools

import pytest

from sglang_mamba_dedup.e2e import stats, verdict, workload
from sglang_mamba_dedup.e2e.context import RunResult
from tests.support.e2e import FakeEngine, plan_spec, status_report

SPEC = dict(plan_spec([[1, 2, 3], [4, 5]]), engine_kwargs={"tp_size": 1})
ON = [status_report(0)]
OFF = [status_report(0, mode="off", state="upstream", calls=5, ours=0)]
FAULT = [status_report(0, fault="commit_step0")]


def _run(mode, reports=(), differ=None, ok=True, answer=None, pid=1000):
    """A run of ``mode`` over the fake engine (``differ``: the prompt whose output gets one token changed), its
    reports written by scheduler processes (pids after ``pid``)."""
    docs = [dict(d, pid=pid + 1 + i) for i, d in enumerate(reports)]
    if not ok:
        return RunResult(mode, pid=pid, error="engine process exited with 1", log=f"/w/run-{mode}.log", reports=docs)
    if answer is None:
        fake = FakeEngine(differ_prompt=None if differ is None else SPEC["prompts"][differ])
        answer = {"ok": True, "pid": pid, **workload.run_plan(SPEC, fake.generate, fake.flush, fake.clock)}
    r = RunResult.of(mode, answer, log=f"/w/run-{mode}.log", reports=docs)
    r.stats = stats.run_stats(answer)
    return r


def _judge(*results, planned=None, track=True, no_reports=False, **plugin):
    modes = planned or [r.mode for r in results]
    return verdict.judge_runs(list(results), SPEC, modes, track_expected=track, no_reports=no_reports, **plugin)


def _zc(docs, zero_copy="on", calls=5, materialized=None, track=None):
    """``docs`` with the zero-copy events (``zero_copy`` None: not recorded; ``materialized``: the count of
    materialized session states, ``track``: of commits with a track set served zero-copy; each not recorded when
    None)."""
    extra = {"zc_commit_calls": calls, "zc_stage_in_calls": 2}
    if materialized is not None:
        extra["zc_materialize_calls"] = materialized
    if track is not None:
        extra["zc_track_commits"] = track
    if zero_copy is not None:
        extra["zero_copy"] = zero_copy
    return [dict(d, events={**d["events"], **extra}) for d in docs]


def test_equal_md5s_and_engaged_pass():
    v = _judge(_run("off", OFF), _run("on", ON))
    assert (v.code, v.failures) == (verdict.EXIT_OK, [])
    assert v.compared and [(c.run, c.mode, c.same) for c in v.md5] == [(2, "on", True)]
    off, on = v.plugin
    assert (off.judged, off.ok, on.judged, on.ok, on.track_commits) == ("off", True, "engaged", True, 10)
    assert on.summary()["engaged"] is True and on.summary()["commit_counts"][0]["ours_commit_calls"] == 10
    assert "engaged" not in off.summary()


@pytest.mark.parametrize(
    "results, code, needle",
    [
        (
            lambda: [_run("off", OFF), _run("on", ON, differ=1)],
            verdict.EXIT_MD5_DIFFER,
            "md5 differ (run 1 off vs run 2 on); first difference at round 1, prompt 1, token 2",
        ),
        (lambda: [_run("off", OFF), _run("on")], verdict.EXIT_NOT_ENGAGED, "no status report was written"),
        (
            lambda: [_run("off", OFF), _run("on", [status_report(0, ours=0)])],
            verdict.EXIT_NOT_ENGAGED,
            "no commit ran through our kernels (10 commit calls, 0 ours)",
        ),
        (
            lambda: [_run("off", OFF), _run("on", [status_report(0, ours_track=0)])],
            verdict.EXIT_NOT_ENGAGED,
            "no commit with track slots ran through our kernel",
        ),
        (
            lambda: [_run("off", [status_report(0, mode="off", ours=7)]), _run("on", ON)],
            verdict.EXIT_OFF_NOT_OFF,
            "the off run was not off: pid 1001: 7 commits through our kernels in the off run",
        ),
        (
            lambda: [_run("off", OFF), _run("on", ON), _run("fault", FAULT)],
            verdict.EXIT_FAULT_NOT_CAUGHT,
            "negative control NOT caught: run 3",
        ),
        (
            lambda: [_run("off", OFF), _run("on", ON), _run("fault", ON, differ=0)],
            verdict.EXIT_NOT_ENGAGED,
            "no scheduler report shows the fault commit_step0 installed",
        ),
        (
            lambda: [_run("off", OFF), _run("on", ON, ok=False)],
            verdict.EXIT_RUN_FAILED,
            "run 2 (on) failed (engine process exited with 1), nothing was compared; see its log: /w/run-on.log",
        ),
        (
            lambda: [_run("off", OFF, ok=False), _run("on", ON, ok=False)],
            verdict.EXIT_RUN_FAILED,
            "all 2 runs failed (engine process exited with 1), nothing was compared; see the logs: /w/run-off.log",
        ),
        (
            lambda: [
                _run("off", OFF),
                _run("on", ON, answer={"ok": True, "rounds": [{"outputs": [{"output_ids": []}]}]}),
            ],
            verdict.EXIT_NO_OUTPUT,
            "nothing generated, nothing compared: run 2 (on) round 1: ",
        ),
    ],
    ids=[
        "md5-differ",
        "no-report",
        "no-commit-of-ours",
        "no-track-commit-of-ours",
        "off-not-off",
        "fault-not-caught",
        "fault-not-installed",
        "run-failed",
        "all-failed",
        "no-output",
    ],
)
def test_each_failure_has_its_code(results, code, needle):
    v = _judge(*results())
    assert v.code == code, v.failures
    assert [c for c, _ in v.failures] == [code] and needle in v.failures[0][1], v.failures


def test_the_negative_control_caught_passes_and_points_at_the_difference():
    v = _judge(_run("off", OFF), _run("on", ON), _run("fault", FAULT, differ=1))
    assert (v.code, v.failures) == (verdict.EXIT_OK, [])
    assert v.negative_control == [{"run": 3, "caught": True}]
    assert v.md5[1].where == "round 1, prompt 1, token 2"


@pytest.mark.parametrize(
    "on, fault, needle",
    [
        (
            _zc(ON, "off: radix cache on"),
            _zc(FAULT),
            "the gate refused zero-copy: off: radix cache on",
        ),
        (
            ON,
            _zc(FAULT),
            "zero-copy asked for but no scheduler report shows it on (events.zero_copy: not recorded)",
        ),
        (_zc(ON, calls=0), _zc(FAULT), "zero-copy on but no commit was served zero-copy (events.zc_commit_calls: 0)"),
        (_zc(ON), _zc(FAULT, calls=0), "zero-copy on but no commit was served zero-copy (events.zc_commit_calls: 0)"),
        (_zc(ON), _zc(FAULT, "off: not GDN"), "the gate refused zero-copy: off: not GDN"),
    ],
    ids=["off-with-reason", "not-recorded", "on-no-zc-commit", "fault-no-zc-commit", "fault-off"],
)
def test_zero_copy_asked_for_must_show_in_the_on_and_fault_runs(on, fault, needle):
    results = [_run("off", OFF), _run("on", on), _run("fault", fault, differ=1)]
    v = _judge(*results, zero_copy=True)
    assert [c for c, _ in v.failures] == [verdict.EXIT_NOT_ENGAGED] and needle in v.failures[0][1], v.failures
    assert v.failures[0][1].startswith("plugin not engaged: ")
    assert _judge(*results).code == verdict.EXIT_OK  # without --zero-copy nothing of it is checked


def test_zero_copy_shown_on_with_commits_passes():
    v = _judge(_run("off", OFF), _run("on", _zc(ON)), _run("fault", _zc(FAULT), differ=1), zero_copy=True)
    assert (v.code, v.failures) == (verdict.EXIT_OK, [])
    assert [c.ok for c in v.plugin] == [True, True, True]
    # one scheduler report of several showing it is enough (the brief: at least one)
    two = [*_zc(ON, "off: no pool"), *_zc(ON)]
    assert _judge(_run("off", OFF), _run("on", two), zero_copy=True).code == verdict.EXIT_OK


@pytest.mark.parametrize(
    "on, fault, needle",
    [
        (_zc(ON), _zc(FAULT, track=3), "(events.zc_track_commits: not recorded)"),
        (_zc(ON, track=0), _zc(FAULT, track=3), "(events.zc_track_commits: 0)"),
        (_zc(ON, track=4), _zc(FAULT, track=0), "(events.zc_track_commits: 0)"),
        (
            _zc(ON, "off: strategy no_buffer"),
            _zc(FAULT, track=3),
            "the gate refused zero-copy: off: strategy no_buffer",
        ),
    ],
    ids=["on-not-recorded", "on-zero", "fault-zero", "refused"],
)
def test_zero_copy_with_the_radix_cache_needs_track_commits_served_zero_copy(on, fault, needle):
    """Radix on: commits with a track set served zero-copy > 0 in the on and the fault run (R2); the counter absent
    fails, never passes; a gate that refused fails with its refusal line."""
    results = [_run("off", OFF), _run("on", on), _run("fault", fault, differ=1)]
    v = _judge(*results, zero_copy=True, zero_copy_radix=True)
    assert [c for c, _ in v.failures] == [verdict.EXIT_NOT_ENGAGED], v.failures
    assert needle in v.failures[0][1], v.failures
    if "refused" not in needle:
        assert "no commit with a track set was served zero-copy" in v.failures[0][1]
    # radix off: the track counter is not asked for (a refusal fails either way)
    assert (_judge(*results, zero_copy=True).code == verdict.EXIT_OK) is ("refused" not in needle)


def test_zero_copy_with_the_radix_cache_passes_with_track_commits_and_cached_tokens():
    results = [_run("off", OFF), _run("on", _zc(ON, track=4)), _run("fault", _zc(FAULT, track=2), differ=1)]
    v = _judge(*results, zero_copy=True, zero_copy_radix=True)
    assert (v.code, v.failures) == (verdict.EXIT_OK, [])
    assert all(r.stats["rounds"][1]["cached_tokens"] > 0 for r in results)


def test_zero_copy_launched_with_the_radix_cache_fails_when_its_pools_say_radix_off():
    """The server's own word (``/get_server_info``'s ``zero_copy.radix_cache``): pools that took zero-copy with the
    radix cache off, in a run launched with it on, fail; saying the strategy passes; report files (no key) judge by
    the counters alone."""

    def said(docs, radix):
        return [dict(d, events={**d["events"], "radix_cache": radix}) for d in docs]

    for radix, ok in ((None, False), ("extra_buffer", True)):
        results = [
            _run("off", OFF),
            _run("on", said(_zc(ON, track=4), radix)),
            _run("fault", said(_zc(FAULT, track=2), radix), differ=1),
        ]
        v = _judge(*results, zero_copy=True, zero_copy_radix=True)
        assert (v.code == verdict.EXIT_OK) is ok, v.failures
        if not ok:
            assert "serve with the radix cache off" in v.failures[0][1], v.failures


def test_zero_copy_with_the_radix_cache_needs_a_track_boundary_crossed_where_the_server_counts_them():
    """``zc_track_rows`` (``/get_server_info`` only): 0 crossings in the on run fails the radix proof (its track rows
    were never adopted: nothing tracked was proven); counted crossings pass; report files without it judge by the
    other counters."""

    def rows(docs, n):
        return [dict(d, events={**d["events"], "zc_track_rows": n}) for d in docs]

    for n, ok in ((0, False), (5, True)):
        results = [
            _run("off", OFF),
            _run("on", rows(_zc(ON, track=4), n)),
            _run("fault", rows(_zc(FAULT, track=2), 5), differ=1),
        ]
        v = _judge(*results, zero_copy=True, zero_copy_radix=True)
        assert (v.code == verdict.EXIT_OK) is ok, v.failures
        if not ok:
            assert "no request crossed a track boundary (events.zc_track_rows: 0)" in v.failures[0][1], v.failures


def test_zero_copy_with_the_radix_cache_needs_round_2_to_read_beyond_round_1s_prompts():
    """R3, issue 50 item 4: round 2's cached tokens must exceed round 1's prompt tokens (prefill states reach a
    prompt at most: only decode-tracked states read back go beyond); the count is said; equal fails, one more passes,
    round 1's prompt tokens not reported judges by cached_tokens > 0 alone."""
    results = [_run("off", OFF), _run("on", _zc(ON, track=4)), _run("fault", _zc(FAULT, track=2), differ=1)]
    prompt1 = results[1].stats["rounds"][0]["prompt_tokens"]
    assert isinstance(prompt1, int) and prompt1 > 0
    assert verdict.decode_tracked_tokens(results[1].stats["rounds"]) > 0  # the fake engine reads decode states back
    for r in results:  # the round totals: what a run without per-request counts is judged by
        r.stats.pop("decode_tracked", None)
    for cached, ok in ((prompt1, False), (prompt1 + 1, True)):
        results[1].stats["rounds"][1]["cached_tokens"] = cached
        v = _judge(*results, zero_copy=True, zero_copy_radix=True)
        assert (v.code == verdict.EXIT_OK) is ok, v.failures
        if not ok:
            assert (
                f"run 2 (on): round 2 read {cached} cached tokens, not more than round 1's {prompt1}"
                in (v.failures[0][1])
            ), v.failures
    results[1].stats["rounds"][1]["cached_tokens"] = prompt1
    results[1].stats["rounds"][0]["prompt_tokens"] = None
    assert _judge(*results, zero_copy=True, zero_copy_radix=True).code == verdict.EXIT_OK
    assert verdict.decode_tracked_tokens(results[1].stats["rounds"]) is None


def _rounds(pairs):
    """Two rounds' per-request meta from (round-1 prompt tokens, round-2 cached tokens) pairs."""
    return [
        {"outputs": [{"output_ids": [1]}] * len(pairs), "meta": [{"prompt_tokens": p} for p, _ in pairs]},
        {
            "outputs": [{"output_ids": [1]}] * len(pairs),
            "meta": [{"prompt_tokens": p + 99, "cached_tokens": c} for p, c in pairs],
        },
    ]


def test_decode_tracked_states_are_judged_per_request_not_by_the_round_totals():
    """A pressure or stress proof evicts tree states on purpose: 14 of 34 requests reading nothing back must not hide
    the 20 that read a decode-tracked state (the round totals, 6,420 cached against 8,738 prompt tokens, failed that
    good run: audit 2026-12-05b BE1). None of the requests beyond its own prompt still fails."""
    good = [(257, 257 + 64)] * 20 + [(257, 0)] * 14
    rounds = _rounds(good)
    per = stats.decode_tracked(rounds)
    assert per == {"requests": 20, "tokens": 20 * 64, "of": 34}
    r = verdict.RunResult(mode="on", ok=True, stats=stats.run_stats({"rounds": rounds}))
    assert sum(c for _, c in good) < sum(p for p, _ in good)  # the totals say "nothing beyond"
    assert verdict.cached_problems([r]) == []
    bad = verdict.RunResult(
        mode="on", ok=True, stats=stats.run_stats({"rounds": _rounds([(257, 257)] * 20 + [(257, 0)] * 14)})
    )
    got = verdict.cached_problems([bad])
    assert len(got) == 1 and "none of its 34 requests more than its own round-1 prompt" in got[0], got
    # counts not reported for every request, or rounds that do not pair up: the totals judge, as before
    assert stats.decode_tracked(_rounds([(257, 300), (257, None)])) is None
    assert stats.decode_tracked(_rounds(good)[:1]) is None
    assert stats.decode_tracked([_rounds(good)[0], _rounds(good[:3])[1]]) is None
    assert stats.decode_tracked(_rounds([(True, 300)])) is None  # a bool is no count


@pytest.mark.parametrize("cached", [0, None], ids=["zero", "not-reported"])
def test_zero_copy_with_the_radix_cache_needs_round_2_to_read_cached_tokens(cached):
    """R3: a run whose round 2 read no prompt token from the cache proves nothing about tracked states: it fails."""
    results = [_run("off", OFF), _run("on", _zc(ON, track=4)), _run("fault", _zc(FAULT, track=2), differ=1)]
    results[1].stats["rounds"][1]["cached_tokens"] = cached
    v = _judge(*results, zero_copy=True, zero_copy_radix=True)
    assert [c for c, _ in v.failures] == [verdict.EXIT_NOT_ENGAGED], v.failures
    what = "not reported" if cached is None else "0"
    assert f"run 2 (on): round 2 read no prompt tokens from the radix cache (cached_tokens {what})" in v.failures[0][1]
    assert _judge(*results, zero_copy=True).code == verdict.EXIT_OK  # radix off: not asked for
    sessions = dict(SPEC, streaming_sessions=True)  # round 2 continues from the session's state, not the tree
    for r in results[1:]:
        r.reports = [dict(d, events=dict(d["events"], zc_materialize_calls=1)) for d in r.reports]
    v = verdict.judge_runs(
        results,
        sessions,
        ["off", "on", "fault"],
        track_expected=True,
        no_reports=False,
        zero_copy=True,
        zero_copy_radix=True,
    )
    assert v.code == verdict.EXIT_OK, v.failures


def test_streaming_sessions_under_zero_copy_must_materialize_the_kept_states():
    sessions = dict(SPEC, streaming_sessions=True)

    def judge(on):
        results = [_run("off", OFF), _run("on", on)]
        return verdict.judge_runs(
            results, sessions, ["off", "on"], track_expected=True, no_reports=False, zero_copy=True
        )

    for on, needle in (
        (_zc(ON), "(events.zc_materialize_calls: not recorded)"),
        (_zc(ON, materialized=0), "(events.zc_materialize_calls: 0)"),
    ):
        v = judge(on)
        assert [c for c, _ in v.failures] == [verdict.EXIT_NOT_ENGAGED], v.failures
        assert "streaming sessions ran but no kept state was materialized " + needle in v.failures[0][1]
    assert judge(_zc(ON, materialized=3)).code == verdict.EXIT_OK
    # without sessions the count is not asked for; without zero-copy nothing of it is checked
    assert _judge(_run("off", OFF), _run("on", _zc(ON)), zero_copy=True).code == verdict.EXIT_OK
    results = [_run("off", OFF), _run("on", ON)]
    assert verdict.judge_runs(results, sessions, ["off", "on"], track_expected=True, no_reports=False).code == 0


def test_the_server_state_read_back_counts_where_a_report_file_lags():
    """A scheduler's report file is rewritten at power-of-two commits, so it can predate the sessions' hand-offs
    (the H200 run: written at commit 128 of 163); the entry the run read back from the server after its
    workload is exact and counts too."""
    sessions = dict(SPEC, streaming_sessions=True)

    def judge(server_state):
        on = _run("on", _zc(ON))  # the report file: zero-copy on, materialized not recorded
        on.server_state = server_state
        return verdict.judge_runs(
            [_run("off", OFF), on], sessions, ["off", "on"], track_expected=True, no_reports=False, zero_copy=True
        )

    read_back = {"decision": "on", "zc_commit_calls": 163, "zc_stage_in_calls": 7, "zc_materialize_calls": 2}
    assert judge([{"zero_copy": read_back}]).code == verdict.EXIT_OK
    for state in (None, [None], [{"zero_copy": None}], [{"zero_copy": dict(read_back, zc_materialize_calls=0)}]):
        assert judge(state).code == verdict.EXIT_NOT_ENGAGED, state


def test_zero_copy_in_the_throughput_route():
    pairs = {"pairs": [{"phase": "batch1", "first": False}], "mismatches": [], "no_output": []}
    for on, code in ((ON, verdict.EXIT_NOT_ENGAGED), (_zc(ON), verdict.EXIT_OK)):
        results = [_run("off", OFF), _run("on", on)]
        v = verdict.judge_pairs(results, pairs, SPEC, track_expected=True, no_reports=False, zero_copy=True)
        assert v.code == code, v.failures


def test_the_fault_checked_is_the_chosen_one():
    zc_fault = [status_report(0, fault="zc_no_stage_in")]
    v = _judge(_run("off", OFF), _run("on", ON), _run("fault", FAULT, differ=1), fault="zc_no_stage_in")
    assert v.code == verdict.EXIT_NOT_ENGAGED
    assert "no scheduler report shows the fault zc_no_stage_in installed" in v.failures[0][1], v.failures
    v = _judge(_run("off", OFF), _run("on", ON), _run("fault", zc_fault, differ=1), fault="zc_no_stage_in")
    assert (v.code, v.failures, v.fault) == (verdict.EXIT_OK, [], "zc_no_stage_in")
    assert _judge(_run("off", OFF), _run("on", ON), _run("fault", zc_fault, differ=1)).code == verdict.EXIT_NOT_ENGAGED
    v = _judge(_run("off", OFF), _run("on", ON), _run("fault", zc_fault), fault="zc_no_stage_in")  # not caught
    assert v.code == verdict.EXIT_FAULT_NOT_CAUGHT
    assert "run 3 (fault zc_no_stage_in: the zero-copy commit skips the stage-in" in v.failures[0][1], v.failures


def test_track_slots_are_only_required_where_expected():
    results = [_run("off", OFF), _run("on", [status_report(0, track=0, ours_track=0)])]
    assert _judge(*results, track=True).code == verdict.EXIT_NOT_ENGAGED
    v = _judge(*results, track=False)
    assert v.code == verdict.EXIT_OK and v.plugin[1].track_commits is None


def test_a_failed_on_run_is_not_judged_for_engagement():
    v = _judge(_run("off", OFF), _run("on", ok=False))  # no report either: not "not engaged"
    assert [c for c, _ in v.failures] == [verdict.EXIT_RUN_FAILED] and not v.compared
    assert v.plugin[1].judged == "failed" and v.plugin[1].summary()["engaged"] is None


def test_no_on_run_started_fails():
    v = _judge(_run("off", OFF), planned=["off", "on"])
    assert v.code == verdict.EXIT_RUN_FAILED
    assert v.failures[-1][1].startswith("no 'on' run was started (--time-budget)")
    assert _judge(_run("off", OFF), _run("off", OFF)).code == verdict.EXIT_OK  # off,off: nothing to engage


def test_no_fault_run_started_fails():
    """The negative control planned but left out by --time-budget: the equal md5s prove nothing (H100, 2026-12-05:
    a radix proof's console read "RESULT: PASS (exit 0; 1 planned runs not started)" without its fault run)."""
    on = _run("on", [status_report(0)])
    v = _judge(_run("off", OFF), on, planned=["off", "on", "fault"])
    assert v.code == verdict.EXIT_RUN_FAILED, v.failures
    assert v.failures[-1][1].startswith("no 'fault' run was started (--time-budget)")
    assert _judge(_run("off", OFF), on, planned=["off", "on"]).code == verdict.EXIT_OK


def test_servers_you_run_are_judged_by_md5_only():
    v = _judge(_run("off"), _run("on"), no_reports=True)  # no reports at all: not readable, not "not engaged"
    assert (v.code, v.plugin) == (verdict.EXIT_OK, [])
    assert _judge(_run("off"), _run("on", differ=0), no_reports=True).code == verdict.EXIT_MD5_DIFFER


@pytest.mark.parametrize(
    "results, code",
    [
        (lambda: [_run("off", OFF, ok=False), _run("on")], verdict.EXIT_RUN_FAILED),  # failed before not engaged
        (lambda: [_run("off", OFF), _run("on", differ=0)], verdict.EXIT_MD5_DIFFER),  # differ before not engaged
        (
            lambda: [_run("off", [status_report(0, mode="off", ours=7)]), _run("on")],
            verdict.EXIT_NOT_ENGAGED,  # not engaged before off not off
        ),
        (
            lambda: [_run("off", [status_report(0, mode="off", ours=7)]), _run("on", ON), _run("fault", FAULT)],
            verdict.EXIT_OFF_NOT_OFF,  # off not off before the negative control
        ),
    ],
    ids=["failed-vs-engaged", "md5-vs-engaged", "engaged-vs-off", "off-vs-fault"],
)
def test_several_failures_the_first_by_precedence(results, code):
    v = _judge(*results())
    assert len(v.failures) == 2 and v.code == code, v.failures


def test_exit_code_precedence():
    assert verdict.PRECEDENCE == (3, 7, 1, 8, 4, 6)  # the documented order (--help, docs/e2e.md)
    assert verdict.exit_code([]) == verdict.EXIT_OK
    for a, b in itertools.combinations(verdict.PRECEDENCE, 2):  # a comes first in PRECEDENCE
        assert verdict.exit_code([(b, "x"), (a, "y")]) == a


def _pairs(mismatches=(), no_output=(), timed=True):
    pair = {"phase": "batch1", "pair": 0, "first": True}
    return {
        "pairs": [pair, dict(pair, pair=1, first=False)] if timed else [pair],
        "mismatches": list(mismatches),
        "no_output": list(no_output),
    }


@pytest.mark.parametrize(
    "data, code, needle",
    [
        (_pairs(), verdict.EXIT_OK, None),
        (_pairs(mismatches=["md5 differ: batch1 pair 1 (on) a vs b"]), verdict.EXIT_MD5_DIFFER, "1 requests differ"),
        (_pairs(no_output=["batch1 pair 0 (off): empty"]), verdict.EXIT_NO_OUTPUT, "nothing generated in 1 requests"),
        (_pairs(timed=False), verdict.EXIT_RUN_FAILED, "no timed pair ran (--time-budget)"),
        (None, verdict.EXIT_RUN_FAILED, "all 2 runs failed"),
    ],
    ids=["pass", "mismatch", "no-output", "no-timed-pair", "no-pairs"],
)
def test_pairs_verdict(data, code, needle):
    results = [_run("off", OFF), _run("on", ON)]
    if data is None:
        results = [
            RunResult("off", error="did not start", log="/w/server-off.log"),
            RunResult("on", error="not started"),
        ]
    v = verdict.judge_pairs(results, data, SPEC, track_expected=True, no_reports=False)
    assert v.code == code, v.failures
    assert needle is None and v.failures == [] or needle in v.failures[0][1]


def test_a_count_that_is_a_bool_is_no_count():
    """Audit 2026-12-05: ``zc_track_commits: true`` and round 2's ``cached_tokens: true`` passed as counts."""
    on = {"zero_copy": "on", "zc_commit_calls": 5}
    problems = verdict.zero_copy_problems([{"events": dict(on, zc_track_commits=True)}], radix=True)
    assert problems and "(events.zc_track_commits: True)" in problems[0], problems
    assert verdict.zero_copy_problems([{"events": dict(on, zc_track_commits=1)}], radix=True) == []
    r = RunResult("on")
    r.stats = {"rounds": [{}, {"cached_tokens": True}]}
    assert "(cached_tokens True)" in verdict.cached_problems([r])[0]
    r.stats = {"rounds": [{}, {"cached_tokens": 1}]}
    assert verdict.cached_problems([r]) == []
