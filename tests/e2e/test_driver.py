"""The e2e driver through main() with faked runs: md5s, engagement, the negative control, the time budget,
exit codes and the temporary checkpoint."""

import json
from pathlib import Path

import pytest

from sglang_mamba_dedup.e2e import cli, driver, verdict
from tests.support.e2e import ARGS, FAULT_REPORTS, ON_REPORTS, FakeRuns, status_report


def test_main_pass_when_equal_and_engaged(workdir, tmp_path, capsys):
    runs = FakeRuns(ON_REPORTS)
    code = cli.main(ARGS + workdir + ["--json-out", str(tmp_path / "s.json")], runner=runs)
    out = capsys.readouterr().out
    assert code == verdict.EXIT_OK, out
    assert [m for m, _ in runs.calls] == ["off", "on"]
    spec_off, spec_on = runs.calls[0][1], runs.calls[1][1]
    assert spec_off == spec_on  # identical arguments in both runs
    assert spec_off["prompt_format"] == "ids" and spec_off["engine_kwargs"]["skip_tokenizer_init"]
    assert spec_off["sampling_params"]["temperature"] == 0.0
    assert spec_off["batch1"] is None and len(spec_off["round2_suffixes"]) == 2
    kw = spec_off["engine_kwargs"]  # the deployment defaults (SGLang 0.5.23 has every field)
    assert kw["cuda_graph_backend_decode"] == "full" and kw["cuda_graph_backend_prefill"] == "disabled"
    assert kw["disable_radix_cache"] is False and "disable_overlap_schedule" not in kw
    assert "settings: decode CUDA graphs on (full); prefill CUDA graphs off; radix cache on" in out
    assert "track slots: required in the on run (radix cache on" in out
    assert "rounds: 2 per run" in out
    assert "plugin: zero-copy commit off; fault of the fault runs: commit_step0" in out
    assert spec_off["plugin"] == {"fault": "commit_step0", "zero_copy": False, "zero_copy_radix": False}
    assert "-> EQUAL" in out and "engaged: YES (track slots required: 10 commits" in out and "RESULT: PASS" in out
    assert "with track slots 10/10" in out
    assert "read from the prefix cache: round 1 0 of " in out
    assert "ratio" not in out and "throughput: not compared" in out
    assert "FakeGPU" in out and "sglang 0.5.23" in out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["exit_code"] == 0 and summary["ids_md5"][0] == summary["ids_md5"][1]
    assert summary["runs"][1]["engaged"] is True and summary["track_expected"] is True
    assert summary["runs"][1]["commit_counts"][0]["ours_track_commit_calls"] == 10
    assert summary["runs"][1]["stats"]["rounds"][1]["cached_tokens"] > 0  # round 2 read round 1 back
    assert "throughput" not in summary and "throughput_ratio" not in summary


def test_main_negative_control_caught(workdir, tmp_path, capsys):
    runs = FakeRuns(FAULT_REPORTS, differ={"fault": 1}, rates={"off": [1.0], "on": [1.0], "fault": [1.0]})
    code = cli.main(ARGS + workdir + ["--modes", "off,on,fault", "--json-out", str(tmp_path / "s.json")], runner=runs)
    out = capsys.readouterr().out
    assert code == verdict.EXIT_OK, out
    assert [m for m, _ in runs.calls] == ["off", "on", "fault"]
    assert (
        "negative control caught: run 3 (fault) differs from run 1 (off) (first difference at round 1, prompt 1" in out
    )
    assert "SGLANG_MAMBA_DEDUP_FAULT=commit_step0" in out and "RESULT: PASS" in out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["negative_control"] == [{"run": 3, "caught": True}] and summary["runs"][2]["engaged"] is True


def test_main_negative_control_not_caught_is_a_failure(workdir, capsys):
    runs = FakeRuns(FAULT_REPORTS, rates={"off": [1.0], "on": [1.0], "fault": [1.0]})  # the fault changed nothing
    code = cli.main(ARGS + workdir + ["--modes", "off,on,fault"], runner=runs)
    out = capsys.readouterr().out
    assert code == verdict.EXIT_FAULT_NOT_CAUGHT == 6
    assert "negative control NOT caught: run 3" in out and "RESULT: FAIL" in out


def test_main_fault_run_without_the_fault_in_its_report_is_not_engaged(workdir, capsys):
    reports = {**ON_REPORTS, "fault": [status_report(0)]}  # the scheduler never installed the fault
    runs = FakeRuns(reports, differ={"fault": 1}, rates={"off": [1.0], "on": [1.0], "fault": [1.0]})
    assert cli.main(ARGS + workdir + ["--modes", "off,on,fault"], runner=runs) == verdict.EXIT_NOT_ENGAGED
    assert "no scheduler report shows the fault commit_step0 installed" in capsys.readouterr().out


def _zc(docs, zero_copy="on", calls=5):
    return [dict(d, events={**d["events"], "zero_copy": zero_copy, "zc_commit_calls": calls}) for d in docs]


def test_main_zero_copy_and_the_chosen_fault(workdir, tmp_path, capsys):
    zc_fault = [status_report(0, fault="zc_no_stage_in")]
    reports = {"off": ON_REPORTS["off"], "on": _zc(ON_REPORTS["on"]), "fault": _zc(zc_fault)}
    runs = FakeRuns(reports, differ={"fault": 1}, rates={"off": [1.0], "on": [1.0], "fault": [1.0]})
    argv = ["--modes", "off,on,fault", "--zero-copy", "--fault", "zc_no_stage_in", "--json-out", str(tmp_path / "s")]
    code = cli.main(ARGS + workdir + argv + ["--no-radix-cache"], runner=runs)
    out = capsys.readouterr().out
    assert code == verdict.EXIT_OK, out
    for _, spec in runs.calls:  # every run the same settings: the radix cache off in the off run too
        assert spec["plugin"] == {"fault": "zc_no_stage_in", "zero_copy": True, "zero_copy_radix": False}
        assert spec["engine_kwargs"]["disable_radix_cache"] is True
    assert "radix cache off" in out and "track slots: not required" in out
    assert "plugin: zero-copy commit on (SGLANG_MAMBA_DEDUP_ZERO_COPY=1 in the on and fault runs" in out
    assert "fault of the fault runs: zc_no_stage_in (the zero-copy commit skips" in out
    starts = [ln for ln in out.splitlines() if ln.startswith("-- run ")]
    assert ["ZERO_COPY" in ln for ln in starts] == [False, True, True]
    assert "SGLANG_MAMBA_DEDUP_FAULT=zc_no_stage_in" in starts[2]
    assert "zero-copy: on; commits served zero-copy 5" in out
    summary = json.loads((tmp_path / "s").read_text())
    assert (summary["zero_copy"], summary["fault"]) == (True, "zc_no_stage_in")


def test_main_zero_copy_not_shown_is_not_engaged(workdir, capsys):
    reports = {**ON_REPORTS, "on": _zc(ON_REPORTS["on"], "off: radix cache on")}
    code = cli.main(ARGS + workdir + ["--zero-copy"], runner=FakeRuns(reports))
    result = capsys.readouterr().out.splitlines()[-1]
    assert code == verdict.EXIT_NOT_ENGAGED, result
    assert "RESULT: FAIL -- plugin not engaged: the gate refused zero-copy: off: radix cache on" in result
    reports = {**ON_REPORTS, "on": [dict(d, events=dict(d["events"], zc_commit_calls=5)) for d in ON_REPORTS["on"]]}
    code = cli.main(ARGS + workdir + ["--zero-copy"], runner=FakeRuns(reports))
    result = capsys.readouterr().out.splitlines()[-1]
    assert code == verdict.EXIT_NOT_ENGAGED, result
    assert "zero-copy asked for but no scheduler report shows it on (events.zero_copy: not recorded)" in result


def test_main_zero_copy_with_the_radix_cache_on(workdir, tmp_path, capsys):
    """--zero-copy keeps the radix cache on (no longer turned off silently): the on and fault runs get the radix
    header says so, no run gets the radix opt-out (removed from all), and the verdict asks for commits with a track set
    served zero-copy."""
    zc_fault = [status_report(0, fault="zc_no_stage_in")]
    track = {"zc_track_commits": 3}
    reports = {
        "off": ON_REPORTS["off"],
        "on": [dict(d, events={**d["events"], **track}) for d in _zc(ON_REPORTS["on"])],
        "fault": [dict(d, events={**d["events"], **track}) for d in _zc(zc_fault)],
    }
    runs = FakeRuns(reports, differ={"fault": 1}, rates={"off": [1.0], "on": [1.0], "fault": [1.0]})
    argv = ["--modes", "off,on,fault", "--zero-copy", "--fault", "zc_no_stage_in", "--mamba-track-interval", "64"]
    code = cli.main(ARGS + workdir + argv, runner=runs)
    out = capsys.readouterr().out
    assert code == verdict.EXIT_OK, out
    for _, spec in runs.calls:
        assert spec["plugin"] == {"fault": "zc_no_stage_in", "zero_copy": True, "zero_copy_radix": True}
        assert spec["engine_kwargs"]["disable_radix_cache"] is False
        assert spec["engine_kwargs"]["mamba_track_interval"] == 64
    assert "radix cache on (mamba strategy auto, track interval 64, tree core " in out
    assert "plugin: zero-copy commit on with the radix cache on (SGLANG_MAMBA_DEDUP_ZERO_COPY=1 in the on and " in out
    starts = [ln for ln in out.splitlines() if ln.startswith("-- run ")]
    assert ["ZERO_COPY=1 (radix cache on)" in ln for ln in starts] == [False, True, True], starts
    assert not any("ZERO_COPY_RADIX" in ln for ln in starts), starts
    # the same runs without the track counter in the reports: not a pass
    for mode in ("on", "fault"):
        reports[mode] = [
            dict(d, events={k: v for k, v in d["events"].items() if k != "zc_track_commits"}) for d in reports[mode]
        ]
    runs = FakeRuns(reports, differ={"fault": 1}, rates={"off": [1.0], "on": [1.0], "fault": [1.0]})
    assert cli.main(ARGS + workdir + argv, runner=runs) == verdict.EXIT_NOT_ENGAGED
    assert "(events.zc_track_commits: not recorded)" in capsys.readouterr().out.splitlines()[-1]


def test_main_md5_differ(workdir, capsys):
    runs = FakeRuns(ON_REPORTS, differ={"on": 1})
    code = cli.main(ARGS + workdir, runner=runs)
    out = capsys.readouterr().out
    assert code == verdict.EXIT_MD5_DIFFER
    assert "DIFFERENT" in out and "round 1, prompt 1, token 2" in out


def test_main_not_engaged_is_nonzero(workdir, capsys):
    # md5s equal, but the scheduler never used our commit: a no-op plugin must not pass
    runs = FakeRuns({"on": [status_report(0, ours=0)]})
    assert cli.main(ARGS + workdir, runner=runs) == verdict.EXIT_NOT_ENGAGED
    assert "engaged: NO" in capsys.readouterr().out


def test_main_no_track_commit_of_ours_is_not_engaged(workdir, capsys):
    runs = FakeRuns({"on": [status_report(0, track=10, ours_track=0)]})
    assert cli.main(ARGS + workdir, runner=runs) == verdict.EXIT_NOT_ENGAGED
    assert "no commit with track slots ran through our kernel" in capsys.readouterr().out.splitlines()[-1]
    # not required: without the radix cache, or when the user says so
    for extra in (["--no-radix-cache"], ["--no-expect-track"]):
        runs = FakeRuns({"on": [status_report(0, track=0, ours_track=0)]})
        assert cli.main(ARGS + workdir + extra, runner=runs) == verdict.EXIT_OK
        out = capsys.readouterr().out
        assert "track slots: not required" in out
    assert "radix cache off" in out or "--no-expect-track" in out


def test_main_missing_report_is_nonzero(workdir):
    runs = FakeRuns({})
    assert cli.main(ARGS + workdir, runner=runs) == verdict.EXIT_NOT_ENGAGED


def test_main_off_run_not_off(workdir):
    runs = FakeRuns({"on": [status_report(0)], "off": [status_report(0, mode="off", ours=7)]})
    assert cli.main(ARGS + workdir, runner=runs) == verdict.EXIT_OFF_NOT_OFF


def test_main_run_failure(workdir, capsys):
    runs = FakeRuns(ON_REPORTS, fail_mode="on")
    assert cli.main(ARGS + workdir, runner=runs) == verdict.EXIT_RUN_FAILED
    assert "boom" in capsys.readouterr().out


def test_main_harness_mode_off_off(workdir, capsys):
    runs = FakeRuns({})
    assert cli.main(ARGS + workdir + ["--modes", "off,off"], runner=runs) == verdict.EXIT_OK
    assert "not checked" in capsys.readouterr().out


def test_time_budget_stops_starting_runs(workdir, monkeypatch, tmp_path, capsys):
    clock = {"t": 0.0}
    monkeypatch.setattr(driver.time, "monotonic", lambda: clock["t"])

    class Slow(FakeRuns):
        def __call__(self, *a):
            clock["t"] += 100.0
            return super().__call__(*a)

    runs = Slow(ON_REPORTS)
    modes = ["--modes", "off,on,off,on,off,on,off"]
    code = cli.main(
        ARGS + workdir + modes + ["--time-budget", "450", "--json-out", str(tmp_path / "s.json")], runner=runs
    )
    out = capsys.readouterr().out
    assert len(runs.calls) == 4  # 400 s used: a 5th run (110 s) would end after 450 s
    assert code == verdict.EXIT_OK, out
    assert "not started (--time-budget 450 s" in out and "run 5 (off), run 6 (on), run 7 (off)" in out
    assert out.count("-> EQUAL") == 3  # the runs that ran are compared
    assert "(exit 0; 3 planned runs not started (--time-budget))" in out.splitlines()[-1]
    assert json.loads((tmp_path / "s.json").read_text())["not_started"] == ["run 5 (off)", "run 6 (on)", "run 7 (off)"]
    runs = Slow(ON_REPORTS)
    assert cli.main(ARGS + workdir + ["--time-budget", "150"], runner=runs) == verdict.EXIT_RUN_FAILED
    assert [m for m, _ in runs.calls] == ["off"]
    assert "no 'on' run was started" in capsys.readouterr().out


def test_warmup_defaults_to_the_whole_generation(workdir):
    runs = FakeRuns(ON_REPORTS)
    cli.main(ARGS + workdir, runner=runs)
    assert runs.calls[0][1]["warmup_tokens"] == -1


def _temp_runs(monkeypatch, tmp_path):
    """Temporary directories go under tmp_path; return where they go."""
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


class SeesModel(FakeRuns):
    """FakeRuns that checks the checkpoint exists while the runs go (removed only afterwards)."""

    def __init__(self, *a, raise_in=None, **k):
        super().__init__(*a, **k)
        self.raise_in = raise_in

    def __call__(self, spec, mode, report_dir, log_path):
        assert (Path(spec["engine_kwargs"]["model_path"]) / "config.json").exists()
        if mode == self.raise_in:
            raise RuntimeError("runner broke")
        return super().__call__(spec, mode, report_dir, log_path)


@pytest.mark.parametrize("raise_in", [None, "on"], ids=["pass", "exception"])
def test_temporary_checkpoint_is_removed_at_exit(monkeypatch, tmp_path, capsys, raise_in):
    tmp = _temp_runs(monkeypatch, tmp_path)
    runs = SeesModel(ON_REPORTS, raise_in=raise_in)
    if raise_in:
        with pytest.raises(RuntimeError):
            cli.main(ARGS, runner=runs)
    else:
        assert cli.main(ARGS, runner=runs) == verdict.EXIT_OK
    assert runs.calls or raise_in
    assert "removed the temporary random-weight checkpoint" in capsys.readouterr().out
    if not raise_in:  # a PASS: the temporary workdir goes as a whole
        assert list(tmp.glob("smd-e2e-*")) == []
        return
    (work,) = tmp.glob("smd-e2e-*")
    assert not (work / "random-model").exists(), list(work.rglob("*"))
    assert (work / "reports-0-off").is_dir()  # the rest of the workdir (logs, reports) stays


def test_temporary_checkpoint_is_removed_when_a_run_fails(monkeypatch, tmp_path):
    tmp = _temp_runs(monkeypatch, tmp_path)
    runs = SeesModel(ON_REPORTS, fail_mode="on")
    assert cli.main(ARGS, runner=runs) == verdict.EXIT_RUN_FAILED
    (work,) = tmp.glob("smd-e2e-*")
    assert not (work / "random-model").exists()


@pytest.mark.parametrize("keep", ["--workdir", "--random-weights-dir"])
def test_user_checkpoint_stays(monkeypatch, tmp_path, keep):
    _temp_runs(monkeypatch, tmp_path)
    runs = SeesModel(ON_REPORTS)
    assert cli.main(ARGS + [keep, str(tmp_path / "mine")], runner=runs) == verdict.EXIT_OK
    model = tmp_path / "mine" / "random-model" if keep == "--workdir" else tmp_path / "mine"
    assert (model / "config.json").exists() and (model / "model.safetensors").exists()


def test_all_runs_failed_does_not_blame_the_plugin(workdir, tmp_path, capsys):
    runs = FakeRuns({}, fail_mode=("off", "on"))
    assert cli.main(ARGS + workdir, runner=runs) == verdict.EXIT_RUN_FAILED
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("RESULT: FAIL") and last.endswith("(exit 3)"), last
    assert "plugin" not in last and "not loaded" not in last and "engaged" not in last, last
    assert "all 2 runs failed" in last
    assert str(tmp_path / "w" / "run-0-off.log") in last and str(tmp_path / "w" / "run-1-on.log") in last


def test_failed_on_run_is_not_judged_for_engagement(workdir, tmp_path, capsys):
    runs = FakeRuns(ON_REPORTS, fail_mode="on")
    assert cli.main(ARGS + workdir, runner=runs) == verdict.EXIT_RUN_FAILED
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "not loaded" not in last and "not engaged" not in last, last
    assert "run 2 (on) failed" in last and str(tmp_path / "w" / "run-1-on.log") in last


def test_streaming_sessions_with_no_free_request_row_is_a_usage_error(workdir, capsys):
    runs = FakeRuns(ON_REPORTS)
    code = cli.main(ARGS + workdir + ["--streaming-sessions", "--max-running-requests", "2"], runner=runs)
    err = capsys.readouterr().err
    assert code == verdict.EXIT_USAGE and runs.calls == []
    assert "error: --streaming-sessions with 2 prompts needs max_running_requests >= 3" in err


def test_streaming_sessions_send_one_turn_at_a_time_unless_asked(workdir, capsys):
    """Concurrent turns batch differently run to run (stock SGLang's tokens moved between two off runs on the
    H200): the session route sends one turn at a time by default, a given --batch-size wins."""
    for extra, want in (([], 1), (["--batch-size", "2"], 2)):
        runs = FakeRuns(ON_REPORTS, fail_mode=("off", "on"))  # the spec is what is looked at
        cli.main(ARGS + workdir + ["--streaming-sessions", *extra], runner=runs)
        capsys.readouterr()
        assert runs.calls and {spec["batch_size"] for _, spec in runs.calls} == {want}
        assert {spec["engine_kwargs"]["max_running_requests"] for _, spec in runs.calls} == {3}
