"""The e2e driver through main() with faked runs: md5s, engagement, the negative control, throughput,
the time budget, exit codes and the temporary checkpoint."""

import json
from pathlib import Path

import pytest

from sglang_mamba_dedup.e2e import cli, driver
from tests.support.e2e import ARGS, FAULT_REPORTS, ON_REPORTS, FakeRuns, status_report


def test_main_pass_when_equal_and_engaged(workdir, tmp_path, capsys):
    runs = FakeRuns(ON_REPORTS)
    code = cli.main(ARGS + workdir + ["--json-out", str(tmp_path / "s.json")], runner=runs)
    out = capsys.readouterr().out
    assert code == driver.EXIT_OK, out
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
    assert code == driver.EXIT_OK, out
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
    assert code == driver.EXIT_FAULT_NOT_CAUGHT == 6
    assert "negative control NOT caught: run 3" in out and "RESULT: FAIL" in out


def test_main_fault_run_without_the_fault_in_its_report_is_not_engaged(workdir, capsys):
    reports = {**ON_REPORTS, "fault": [status_report(0)]}  # the scheduler never installed the fault
    runs = FakeRuns(reports, differ={"fault": 1}, rates={"off": [1.0], "on": [1.0], "fault": [1.0]})
    assert cli.main(ARGS + workdir + ["--modes", "off,on,fault"], runner=runs) == driver.EXIT_NOT_ENGAGED
    assert "no scheduler report shows the fault commit_step0 installed" in capsys.readouterr().out


def test_main_md5_differ(workdir, capsys):
    runs = FakeRuns(ON_REPORTS, differ={"on": 1})
    code = cli.main(ARGS + workdir, runner=runs)
    out = capsys.readouterr().out
    assert code == driver.EXIT_MD5_DIFFER
    assert "DIFFERENT" in out and "round 1, prompt 1, token 2" in out


def test_main_not_engaged_is_nonzero(workdir, capsys):
    # md5s equal, but the scheduler never used our commit: a no-op plugin must not pass
    runs = FakeRuns({"on": [status_report(0, ours=0)]})
    assert cli.main(ARGS + workdir, runner=runs) == driver.EXIT_NOT_ENGAGED
    assert "engaged: NO" in capsys.readouterr().out


def test_main_no_track_commit_of_ours_is_not_engaged(workdir, capsys):
    runs = FakeRuns({"on": [status_report(0, track=10, ours_track=0)]})
    assert cli.main(ARGS + workdir, runner=runs) == driver.EXIT_NOT_ENGAGED
    assert "no commit with track slots ran through our kernel" in capsys.readouterr().out.splitlines()[-1]
    # not required: without the radix cache, or when the user says so
    for extra in (["--no-radix-cache"], ["--no-expect-track"]):
        runs = FakeRuns({"on": [status_report(0, track=0, ours_track=0)]})
        assert cli.main(ARGS + workdir + extra, runner=runs) == driver.EXIT_OK
        out = capsys.readouterr().out
        assert "track slots: not required" in out
    assert "radix cache off" in out or "--no-expect-track" in out


def test_main_missing_report_is_nonzero(workdir):
    runs = FakeRuns({})
    assert cli.main(ARGS + workdir, runner=runs) == driver.EXIT_NOT_ENGAGED


def test_main_off_run_not_off(workdir):
    runs = FakeRuns({"on": [status_report(0)], "off": [status_report(0, mode="off", ours=7)]})
    assert cli.main(ARGS + workdir, runner=runs) == driver.EXIT_OFF_NOT_OFF


def test_main_run_failure(workdir, capsys):
    runs = FakeRuns(ON_REPORTS, fail_mode="on")
    assert cli.main(ARGS + workdir, runner=runs) == driver.EXIT_RUN_FAILED
    assert "boom" in capsys.readouterr().out


def test_main_harness_mode_off_off(workdir, capsys):
    runs = FakeRuns({})
    assert cli.main(ARGS + workdir + ["--modes", "off,off"], runner=runs) == driver.EXIT_OK
    assert "not checked" in capsys.readouterr().out


def test_throughput_runs_throwaway_alternating_table(workdir, tmp_path, capsys):
    rates = {"off": [900.0, 1000.0, 1010.0, 990.0], "on": [1005.0, 1020.0, 995.0]}  # the first off is the throwaway
    runs = FakeRuns(ON_REPORTS, rates=rates)
    code = cli.main(ARGS + workdir + ["--throughput-runs", "3", "--json-out", str(tmp_path / "s.json")], runner=runs)
    out = capsys.readouterr().out
    assert code == driver.EXIT_OK, out
    assert [m for m, _ in runs.calls] == ["off", "off", "on", "off", "on", "off", "on"]
    assert runs.calls[0][1]["batch1"] == {"prompt_index": 0, "max_new_tokens": 256}
    assert (
        "[throwaway: untimed]"
        in out.splitlines()[[i for i, ln in enumerate(out.splitlines()) if "-- run 1/7" in ln][0]]
    )
    assert "throughput (3 off and 3 on runs, alternating, after 1 untimed throwaway engine start" in out
    assert (
        "| batch 1: 1 request x 256 new tokens | 1,000.0 (990.0 - 1,010.0, 3 runs) | 1,005.0 (995.0 - 1,020.0, 3 runs) | within noise"
        in out
    )
    assert "| full batch: round 1, 2 requests x 4 new tokens |" in out
    assert "md5 token ids, batch 1: run 1 " in out and "all 7 runs EQUAL" in out
    assert "ratio" not in out
    summary = json.loads((tmp_path / "s.json").read_text())
    th = summary["throughput"]
    assert (
        th["phases"]["batch1"]["off"]["median"] == pytest.approx(1000.0)
        and th["phases"]["batch1"]["comparison"]["overlap"]
    )
    assert len(th["samples"]) == 6 and summary["runs"][0]["throwaway"] is True
    assert summary["modes"] == ["off", "off", "on", "off", "on", "off", "on"]


def test_throughput_faster_mode_and_no_throwaway(workdir, capsys):
    rates = {"off": [1000.0, 1001.0, 1002.0], "on": [1100.0, 1101.0, 1102.0]}
    runs = FakeRuns(ON_REPORTS, rates=rates)
    assert cli.main(ARGS + workdir + ["--throughput-runs", "3", "--no-throwaway"], runner=runs) == driver.EXIT_OK
    out = capsys.readouterr().out
    assert [m for m, _ in runs.calls] == ["off", "on"] * 3
    assert "on faster: median 10.0% above off (the ranges do not overlap)" in out
    assert "throwaway" not in out.split("throughput (")[1]


def test_throughput_from_earlier_summary_merges_samples(workdir, tmp_path, capsys):
    first = tmp_path / "first.json"
    runs = FakeRuns(ON_REPORTS, rates={"off": [500.0, 1000.0, 1000.0], "on": [1100.0]})
    assert cli.main(ARGS + workdir + ["--throughput-runs", "2", "--json-out", str(first)], runner=runs) == 0
    capsys.readouterr()
    runs = FakeRuns(ON_REPORTS, rates={"off": [1000.0], "on": [1100.0]})
    extra = ["--throughput-runs", "1", "--no-throwaway", "--throughput-from", str(first)]
    assert cli.main(ARGS + workdir + extra, runner=runs) == driver.EXIT_OK
    out = capsys.readouterr().out
    assert "throughput (3 off and 3 on runs, alternating, 4 of them from --throughput-from" in out
    assert "on faster: median 10.0% above off" in out
    assert out.count("md5 token ids, merged ") == 4 and "DIFFERENT" not in out


def test_throughput_from_another_workload_is_refused(workdir, tmp_path, capsys):
    first = tmp_path / "first.json"
    cli.main(ARGS + workdir + ["--throughput-runs", "1", "--json-out", str(first)], runner=FakeRuns(ON_REPORTS))
    capsys.readouterr()
    runs = FakeRuns(ON_REPORTS)
    extra = ["--throughput-runs", "1", "--max-new-tokens", "5", "--throughput-from", str(first)]
    assert cli.main(ARGS + workdir + extra, runner=runs) == 2
    err = capsys.readouterr().err
    assert "another workload (sampling_params differ" in err and not runs.calls


def test_time_budget_stops_starting_runs(workdir, monkeypatch, tmp_path, capsys):
    clock = {"t": 0.0}
    monkeypatch.setattr(driver.time, "monotonic", lambda: clock["t"])

    class Slow(FakeRuns):
        def __call__(self, *a):
            clock["t"] += 100.0
            return super().__call__(*a)

    runs = Slow(ON_REPORTS)
    code = cli.main(
        ARGS + workdir + ["--throughput-runs", "3", "--time-budget", "450", "--json-out", str(tmp_path / "s.json")],
        runner=runs,
    )
    out = capsys.readouterr().out
    assert len(runs.calls) == 4  # 400 s used: a 5th run (110 s) would end after 450 s
    assert code == driver.EXIT_OK, out
    assert "not started (--time-budget 450 s" in out and "run 5 (on), run 6 (off), run 7 (on)" in out
    assert "not compared: 2 off / 1 on runs" in out
    assert "(exit 0; 3 planned runs not started (--time-budget))" in out.splitlines()[-1]
    assert json.loads((tmp_path / "s.json").read_text())["not_started"] == ["run 5 (on)", "run 6 (off)", "run 7 (on)"]
    runs = Slow(ON_REPORTS)
    assert cli.main(ARGS + workdir + ["--throughput-runs", "1", "--time-budget", "150"], runner=runs) == 3
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
        assert cli.main(ARGS, runner=runs) == driver.EXIT_OK
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
    assert cli.main(ARGS, runner=runs) == driver.EXIT_RUN_FAILED
    (work,) = tmp.glob("smd-e2e-*")
    assert not (work / "random-model").exists()


@pytest.mark.parametrize("keep", ["--workdir", "--random-weights-dir"])
def test_user_checkpoint_stays(monkeypatch, tmp_path, keep):
    _temp_runs(monkeypatch, tmp_path)
    runs = SeesModel(ON_REPORTS)
    assert cli.main(ARGS + [keep, str(tmp_path / "mine")], runner=runs) == driver.EXIT_OK
    model = tmp_path / "mine" / "random-model" if keep == "--workdir" else tmp_path / "mine"
    assert (model / "config.json").exists() and (model / "model.safetensors").exists()


def test_all_runs_failed_does_not_blame_the_plugin(workdir, tmp_path, capsys):
    runs = FakeRuns({}, fail_mode=("off", "on"))
    assert cli.main(ARGS + workdir, runner=runs) == driver.EXIT_RUN_FAILED
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("RESULT: FAIL") and last.endswith("(exit 3)"), last
    assert "plugin" not in last and "not loaded" not in last and "engaged" not in last, last
    assert "all 2 runs failed" in last
    assert str(tmp_path / "w" / "run-0-off.log") in last and str(tmp_path / "w" / "run-1-on.log") in last


def test_failed_on_run_is_not_judged_for_engagement(workdir, tmp_path, capsys):
    runs = FakeRuns(ON_REPORTS, fail_mode="on")
    assert cli.main(ARGS + workdir, runner=runs) == driver.EXIT_RUN_FAILED
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "not loaded" not in last and "not engaged" not in last, last
    assert "run 2 (on) failed" in last and str(tmp_path / "w" / "run-1-on.log") in last
