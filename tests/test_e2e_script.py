"""The e2e md5 driver without a GPU: prompts, hashing, report parsing, exit codes (runs are faked)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_mamba_dedup import e2e

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- prompts and hashing
def test_prompt_set_is_fixed_mixed_and_large_enough():
    prompts = e2e.load_prompts()
    assert len(prompts) >= 32
    assert len(set(prompts)) == len(prompts)
    words = sorted(len(p.split()) for p in prompts)
    assert words[0] <= 5 and words[-1] >= 1000  # very short and very long prompts
    assert sum(1 for w in words if 20 <= w <= 200) >= 8  # and plenty in between
    assert e2e.load_prompts() == prompts  # deterministic
    assert e2e.load_prompts(limit=3) == prompts[:3]


def test_text_to_ids_is_deterministic_and_in_vocab():
    text = "Hello, world! Hello again."
    ids = e2e.text_to_ids(text, 1024)
    assert ids == e2e.text_to_ids(text, 1024)
    assert len(ids) == 7  # Hello , world ! Hello again .
    assert ids[0] == ids[4]
    assert all(0 <= i < 1024 for i in ids)
    # pinned values: the ids must not change across Python versions or machines (crc32, no hash() salt)
    import zlib

    assert e2e.text_to_ids("Hello.", 248320) == [zlib.crc32(b"Hello") % 248320, zlib.crc32(b".") % 248320]
    with pytest.raises(ValueError):
        e2e.text_to_ids("x", 0)


def test_md5_of_ids_and_texts():
    a = [[1, 2, 3], [4]]
    assert e2e.md5_of_ids(a) == e2e.md5_of_ids([[1, 2, 3], [4]])
    assert e2e.md5_of_ids(a) != e2e.md5_of_ids([[1, 2], [3, 4]])  # prompt boundaries count
    assert e2e.md5_of_ids(a) != e2e.md5_of_ids([[4], [1, 2, 3]])  # order counts
    assert e2e.md5_of_texts(["a", "b"]) == e2e.md5_of_texts(["a", "b"])
    assert e2e.md5_of_texts(["a", "b"]) != e2e.md5_of_texts(["ab", ""])
    assert e2e.md5_of_texts(["a", None]) is None  # skip_tokenizer_init: no text


def test_first_difference():
    assert e2e.first_difference([[1, 2], [3]], [[1, 2], [3]]) is None
    assert e2e.first_difference([[1, 2], [3, 4, 5]], [[1, 2], [3, 9, 5]]) == (1, 1)
    assert e2e.first_difference([[1, 2]], [[1, 2, 3]]) == (0, 2)


# ----------------------------------------------------------------------------- status reports
def _report(pid, mode="on", state="ours", dense=4096, physical=2048, calls=10, ours=10, patches=None):
    doc = {
        "pid": pid,
        "argv0": "-c",
        "sglang_version": "0.5.23",
        "mode": mode,
        "patches": patches
        if patches is not None
        else {
            "pool": {"feature": "dedup_pool", "state": "applied", "reason": None},
            "commit": {"feature": "fused_commit", "state": "applied", "reason": None},
        },
        "events": {"commit_calls": calls, "ours_commit_calls": ours},
    }
    if state is not None:
        doc["events"]["dedup_layout"] = {
            "state": state,
            "reason": None,
            "dense_bytes": dense,
            "physical_bytes": physical,
        }
    return doc


def _write_reports(d: Path, docs):
    d.mkdir(parents=True, exist_ok=True)
    for doc in docs:
        (d / f"status-{doc['pid']}.json").write_text(json.dumps(doc))


def test_read_reports_skips_foreign_and_broken_files(tmp_path):
    _write_reports(tmp_path, [_report(11), _report(12)])
    (tmp_path / "status-13.json").write_text("{not json")
    (tmp_path / "status-14.json").write_text(json.dumps({"no": "pid"}))
    (tmp_path / "other.json").write_text("{}")
    reports, problems = e2e.read_reports(tmp_path)
    assert [r["pid"] for r in reports] == [11, 12]
    assert len(problems) == 2
    assert e2e.read_reports(tmp_path / "missing") == ([], [])


def test_engaged_from_scheduler_report():
    ok, reasons, rep = e2e.check_engaged([_report(100, state=None, calls=0, ours=0), _report(200)], parent_pid=100)
    assert ok, reasons
    assert rep["pid"] == 200
    ok, reasons, _ = e2e.check_engaged([_report(200, state="upstream")], parent_pid=100)
    assert ok, reasons


@pytest.mark.parametrize(
    "reports, needle",
    [
        ([], "no status report"),
        ([_report(100)], "only the engine's own process"),  # the parent's report does not count
        ([_report(100), _report(200, state=None)], "no dedup_layout"),
        ([_report(200, state="stock")], "layout is 'stock'"),
        ([_report(200, dense=2048, physical=2048)], "no bytes saved"),
        ([_report(200, ours=0)], "no commit ran through our kernels"),
        ([_report(200, mode="off")], "mode is 'off'"),
        ([_report(200), _report(201, ours=0)], "pid 201"),  # every rank must engage
    ],
    ids=["missing", "parent-only", "no-pool", "stock", "no-bytes", "no-ours-commit", "mode-off", "one-rank"],
)
def test_not_engaged(reports, needle):
    ok, reasons, _ = e2e.check_engaged(reports, parent_pid=100)
    assert not ok
    assert any(needle in r for r in reasons), reasons


def test_off_run_check():
    assert e2e.check_off([], 100) == (True, [])
    assert e2e.check_off([_report(200, mode="off", state="upstream", ours=0)], 100)[0]
    assert e2e.check_off([_report(100, mode="on")], 100)[0]  # the parent's own report is not the scheduler's
    ok, reasons = e2e.check_off([_report(200, mode="off", ours=3)], 100)
    assert not ok and "3 commits" in reasons[0]


def test_describe_report():
    text = e2e.describe_report(_report(200))
    assert "saved 2,048 (50.0%)" in text and "through our kernels: 10" in text and "pool=applied" in text
    assert e2e.describe_report(None) == "no scheduler report"


# ----------------------------------------------------------------------------- engine arguments
def test_engine_args_passthrough_and_defaults():
    assert e2e.parse_engine_args(["a=1", "b=true", "c=triton", "d=0.5", "e=none", "f-g=[1,2]"]) == {
        "a": 1,
        "b": True,
        "c": "triton",
        "d": 0.5,
        "e": None,
        "f_g": [1, 2],
    }
    with pytest.raises(ValueError):
        e2e.parse_engine_args(["novalue"])


@pytest.mark.release
def test_engine_kwargs_are_sglang_server_args():
    """Every key the driver passes by default is a field of the installed SGLang's ServerArgs."""
    import dataclasses

    server_args = pytest.importorskip("sglang.srt.server_args")
    args = e2e._build_parser().parse_args(["--mem-fraction-static", "0.5"])
    args.num_prompts_effective = 34
    kw = e2e.build_engine_kwargs(args, "/m", skip_tokenizer=True)
    if dataclasses.is_dataclass(server_args.ServerArgs):  # up to 0.5.2x: a dataclass
        fields = {f.name for f in dataclasses.fields(server_args.ServerArgs)}
    else:  # 0.5.23: a msgspec Struct
        msgspec = pytest.importorskip("msgspec")
        fields = {f.name for f in msgspec.structs.fields(server_args.ServerArgs)}
    assert set(kw) <= fields, set(kw) - fields
    assert kw["speculative_algorithm"] == "NEXTN" and kw["speculative_eagle_topk"] == 1
    assert kw["speculative_num_draft_tokens"] == 4 and kw["speculative_num_steps"] == 3
    assert kw["speculative_draft_model_path"] == "/m" and kw["max_running_requests"] == 34


# ----------------------------------------------------------------------------- main() with faked runs
class FakeRuns:
    """Stands in for the two engine processes: returns outputs and writes the scheduler reports."""

    def __init__(self, outputs_by_mode, reports_by_mode=None, fail_mode=None):
        self.outputs_by_mode = outputs_by_mode
        self.reports_by_mode = reports_by_mode or {}
        self.fail_modes = {fail_mode} if isinstance(fail_mode, str) else set(fail_mode or ())
        self.calls = []

    def __call__(self, spec, mode, report_dir, log_path):
        self.calls.append((mode, spec))
        parent = 1000 + len(self.calls)
        if mode in self.fail_modes:
            log_path.write_text("Traceback: boom\n")
            return {"ok": False, "pid": parent, "error": "engine process exited with 1"}
        docs = [dict(d, pid=parent + 100 + i) for i, d in enumerate(self.reports_by_mode.get(mode, []))]
        _write_reports(report_dir, docs)
        outs = self.outputs_by_mode[mode]
        return {
            "ok": True,
            "pid": parent,
            "gen_seconds": 2.0 if mode == "off" else 1.6,
            "outputs": [{"output_ids": o, "text": None} for o in outs],
            "meta": [
                {
                    "completion_tokens": len(o),
                    "spec_verify_ct": max(1, len(o) // 2),
                    "spec_correct_drafts_histogram": [1, 2, 0, 1],
                }
                for o in outs
            ],
            "versions": {"sglang": "0.5.23", "torch": "x"},
            "gpu": {"name": "FakeGPU", "count": 1},
        }


GOOD = [[1, 2, 3, 4], [5, 6, 7, 8]]
ON_REPORTS = {"on": [_report(0)], "off": [_report(0, mode="off", state="upstream", calls=5, ours=0)]}
ARGS = ["--random-weights", "--random-preset", "tiny", "--num-prompts", "2", "--max-new-tokens", "4"]


@pytest.fixture
def workdir(tmp_path):
    return ["--workdir", str(tmp_path / "w"), "--random-weights-dir", str(tmp_path / "model")]


def test_main_pass_when_equal_and_engaged(workdir, tmp_path, capsys):
    runs = FakeRuns({"off": GOOD, "on": GOOD}, ON_REPORTS)
    code = e2e.main(ARGS + workdir + ["--json-out", str(tmp_path / "s.json")], runner=runs)
    out = capsys.readouterr().out
    assert code == e2e.EXIT_OK, out
    assert [m for m, _ in runs.calls] == ["off", "on"]
    spec_off, spec_on = runs.calls[0][1], runs.calls[1][1]
    assert spec_off == spec_on  # identical arguments in both runs
    assert spec_off["prompt_format"] == "ids" and spec_off["engine_kwargs"]["skip_tokenizer_init"]
    assert spec_off["sampling_params"]["temperature"] == 0.0
    assert "EQUAL" in out and "ratio on/off = 1.250" in out and "engaged: YES" in out and "RESULT: PASS" in out
    assert "FakeGPU" in out and "sglang 0.5.23" in out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["exit_code"] == 0 and summary["ids_md5"][0] == summary["ids_md5"][1]
    assert summary["runs"][1]["engaged"] is True


def test_main_md5_differ(workdir, capsys):
    runs = FakeRuns({"off": GOOD, "on": [[1, 2, 3, 4], [5, 6, 0, 8]]}, ON_REPORTS)
    code = e2e.main(ARGS + workdir, runner=runs)
    out = capsys.readouterr().out
    assert code == e2e.EXIT_MD5_DIFFER
    assert "DIFFERENT" in out and "prompt 1, token 2" in out


def test_main_not_engaged_is_nonzero(workdir, capsys):
    # md5s equal, but the scheduler never used our commit: a no-op plugin must not pass
    runs = FakeRuns({"off": GOOD, "on": GOOD}, {"on": [_report(0, ours=0)]})
    assert e2e.main(ARGS + workdir, runner=runs) == e2e.EXIT_NOT_ENGAGED
    assert "engaged: NO" in capsys.readouterr().out


def test_main_missing_report_is_nonzero(workdir):
    runs = FakeRuns({"off": GOOD, "on": GOOD}, {})
    assert e2e.main(ARGS + workdir, runner=runs) == e2e.EXIT_NOT_ENGAGED


def test_main_off_run_not_off(workdir):
    runs = FakeRuns({"off": GOOD, "on": GOOD}, {"on": [_report(0)], "off": [_report(0, mode="off", ours=7)]})
    assert e2e.main(ARGS + workdir, runner=runs) == e2e.EXIT_OFF_NOT_OFF


def test_main_run_failure(workdir, capsys):
    runs = FakeRuns({"off": GOOD, "on": GOOD}, ON_REPORTS, fail_mode="on")
    assert e2e.main(ARGS + workdir, runner=runs) == e2e.EXIT_RUN_FAILED
    assert "boom" in capsys.readouterr().out


def test_main_harness_mode_off_off(workdir, capsys):
    runs = FakeRuns({"off": GOOD}, {})
    assert e2e.main(ARGS + workdir + ["--modes", "off,off"], runner=runs) == e2e.EXIT_OK
    assert "not checked" in capsys.readouterr().out


def test_cli_help_runs_without_sglang_import():
    """`python -m sglang_mamba_dedup.e2e --help` is cheap: no torch, no SGLang."""
    code = (
        "import sys, runpy; sys.argv=['e2e','--help']\n"
        "try: runpy.run_module('sglang_mamba_dedup.e2e', run_name='__main__')\n"
        "except SystemExit: pass\n"
        "print('MODS', 'torch' in sys.modules, 'sglang' in sys.modules)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert "--random-weights" in r.stdout and "MODS False False" in r.stdout, r.stderr


def test_example_wrapper_calls_main(monkeypatch):
    import runpy

    seen = {}
    monkeypatch.setattr(e2e, "main", lambda argv=None: seen.setdefault("argv", argv) and 0 or 0)
    monkeypatch.setattr(sys, "argv", ["e2e_md5.py", "--modes", "off,on"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(ROOT / "examples" / "e2e_md5.py"), run_name="__main__")
    assert exc.value.code == 0
    assert "argv" in seen


def test_main_ratio_uses_means_per_mode(workdir, tmp_path, capsys):
    runs = FakeRuns({"off": GOOD, "on": GOOD}, ON_REPORTS)
    code = e2e.main(ARGS + workdir + ["--modes", "off,on,off", "--json-out", str(tmp_path / "s.json")], runner=runs)
    assert code == e2e.EXIT_OK
    assert [m for m, _ in runs.calls] == ["off", "on", "off"]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["throughput_ratio"] == pytest.approx(1.25)
    assert "means over runs of the same mode" in capsys.readouterr().out


def test_warmup_defaults_to_the_whole_generation(workdir):
    runs = FakeRuns({"off": GOOD, "on": GOOD}, ON_REPORTS)
    e2e.main(ARGS + workdir, runner=runs)
    assert runs.calls[0][1]["warmup_tokens"] == -1


# ----------------------------------------------------------------------------- usage errors, no GPU, cleanup
@pytest.fixture
def no_build(monkeypatch):
    """Building a checkpoint is a failure of the test: usage errors and a missing GPU must stop first."""
    from sglang_mamba_dedup import random_model

    def build(*a, **k):
        raise AssertionError("a random-weight checkpoint was built")

    monkeypatch.setattr(random_model, "build_random_model", build)


def _stderr_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--random-weights", "--random-preset", "foo"], "invalid choice: 'foo'"),
        (["--engine-arg", "novalue"], "KEY=VALUE"),
        (["--engine-arg", "=1"], "KEY=VALUE"),
        (["--random-weights", "--random-dim", "num_hidden_layers=abc"], "KEY=INT"),
        (["--random-weights", "--random-dim", "no_such_field=3"], "no_such_field"),
        (["--random-dim", "num_hidden_layers=2"], "needs --random-weights"),
        (["--modes", "off"], "--modes"),
        (["--modes", "off,maybe"], "--modes"),
        (["--num-prompts", "0"], "--num-prompts"),
        (["--model-path", "org/model", "--prompt-format", "ids"], "--vocab-size"),
    ],
    ids=[
        "preset",
        "engine-arg",
        "engine-arg-nokey",
        "random-dim-int",
        "random-dim-field",
        "random-dim-alone",
        "modes-one",
        "modes-bad",
        "num-prompts",
        "ids-no-vocab",
    ],
)
def test_usage_errors_exit_2_before_anything_runs(extra, needle, tmp_path, no_build, capsys):
    runs = FakeRuns({"off": GOOD, "on": GOOD}, ON_REPORTS)
    with pytest.raises(SystemExit) as exc:
        e2e.main(["--workdir", str(tmp_path / "w")] + extra, runner=runs)
    assert exc.value.code == 2
    line = _stderr_line(capsys.readouterr().err)
    assert needle in line, line
    assert not runs.calls and not (tmp_path / "w").exists()


def test_usage_error_from_the_command_line(tmp_path):
    """Through the console entry point: exit 2, one line on stderr, no traceback."""
    cmd = [
        sys.executable,
        "-m",
        "sglang_mamba_dedup",
        "e2e",
        "--random-weights",
        "--random-preset",
        "tiny",
        "--workdir",
        str(tmp_path / "w"),
        "--run-timeout",
        "1",
        "--random-dim",
        "x=abc",
    ]
    r = subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "KEY=INT" in _stderr_line(r.stderr)


def test_help_lists_presets_examples_and_exit_codes():
    text = e2e._build_parser().format_help()
    from sglang_mamba_dedup.random_model import PRESETS

    assert all(name in text for name in PRESETS)
    assert text.count("sglang-mamba-dedup e2e --") >= 2  # example command lines
    codes = {
        e2e.EXIT_OK,
        e2e.EXIT_MD5_DIFFER,
        e2e.EXIT_NOT_ENGAGED,
        e2e.EXIT_RUN_FAILED,
        e2e.EXIT_OFF_NOT_OFF,
        e2e.EXIT_CANNOT_RUN,
    }
    assert len(codes) == 6  # distinct
    epilog = text[text.index("exit status") :]
    for c in codes:
        assert f"\n  {c} " in epilog, epilog
    assert "CUDA" in epilog and "usage" in epilog


def test_no_cuda_stops_before_building_the_checkpoint(monkeypatch, tmp_path, no_build, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code = e2e.main(["--random-weights", "--workdir", str(tmp_path / "w"), "--num-prompts", "2"])
    assert code == e2e.EXIT_CANNOT_RUN
    captured = capsys.readouterr()
    line = _stderr_line(captured.err)
    assert "CUDA GPU" in line and "torch.cuda.is_available()" in line
    assert "RESULT" not in captured.out and not (tmp_path / "w").exists()


def test_cuda_check_is_about_the_engine_device(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "CUDA GPU" in e2e._cuda_problem({})
    assert "CUDA GPU" in e2e._cuda_problem({"device": "cuda"})
    assert e2e._cuda_problem({"device": "cpu"}) is None  # the user picked another device: not our call
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert e2e._cuda_problem({}) is None


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
    runs = SeesModel({"off": GOOD, "on": GOOD}, ON_REPORTS, raise_in=raise_in)
    if raise_in:
        with pytest.raises(RuntimeError):
            e2e.main(ARGS, runner=runs)
    else:
        assert e2e.main(ARGS, runner=runs) == e2e.EXIT_OK
    assert runs.calls or raise_in
    (work,) = tmp.glob("smd-e2e-*")
    assert not (work / "random-model").exists(), list(work.rglob("*"))
    assert (work / "reports-0-off").is_dir()  # the rest of the workdir (logs, reports) stays
    assert "removed the temporary random-weight checkpoint" in capsys.readouterr().out


def test_temporary_checkpoint_is_removed_when_a_run_fails(monkeypatch, tmp_path):
    tmp = _temp_runs(monkeypatch, tmp_path)
    runs = SeesModel({"off": GOOD, "on": GOOD}, ON_REPORTS, fail_mode="on")
    assert e2e.main(ARGS, runner=runs) == e2e.EXIT_RUN_FAILED
    (work,) = tmp.glob("smd-e2e-*")
    assert not (work / "random-model").exists()


@pytest.mark.parametrize("keep", ["--workdir", "--random-weights-dir"])
def test_user_checkpoint_stays(monkeypatch, tmp_path, keep):
    _temp_runs(monkeypatch, tmp_path)
    runs = SeesModel({"off": GOOD, "on": GOOD}, ON_REPORTS)
    assert e2e.main(ARGS + [keep, str(tmp_path / "mine")], runner=runs) == e2e.EXIT_OK
    model = tmp_path / "mine" / "random-model" if keep == "--workdir" else tmp_path / "mine"
    assert (model / "config.json").exists() and (model / "model.safetensors").exists()


def test_all_runs_failed_does_not_blame_the_plugin(workdir, tmp_path, capsys):
    runs = FakeRuns({"off": GOOD, "on": GOOD}, {}, fail_mode=("off", "on"))
    assert e2e.main(ARGS + workdir, runner=runs) == e2e.EXIT_RUN_FAILED
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("RESULT: FAIL") and last.endswith("(exit 3)"), last
    assert "plugin" not in last and "not loaded" not in last and "engaged" not in last, last
    assert "all 2 runs failed" in last
    assert str(tmp_path / "w" / "run-0-off.log") in last and str(tmp_path / "w" / "run-1-on.log") in last


def test_failed_on_run_is_not_judged_for_engagement(workdir, tmp_path, capsys):
    runs = FakeRuns({"off": GOOD, "on": GOOD}, ON_REPORTS, fail_mode="on")
    assert e2e.main(ARGS + workdir, runner=runs) == e2e.EXIT_RUN_FAILED
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "not loaded" not in last and "not engaged" not in last, last
    assert "run 2 (on) failed" in last and str(tmp_path / "w" / "run-1-on.log") in last


# ------------------------------------------------------------------ server route (a fake launch_server)
import signal  # noqa: E402

from sglang_mamba_dedup import e2e_server  # noqa: E402

FAKE_SERVER = str(Path(__file__).resolve().parent / "fake_launch_server.py")


def _fake_command(engine_kwargs, port, flag):
    cmd = e2e_server.server_command(engine_kwargs, port, flag)
    assert cmd[1:3] == ["-m", "sglang.launch_server"] and ("--enable-mamba-conv-dedup" in cmd) == flag
    return [sys.executable, FAKE_SERVER] + cmd[3:]


def _server_runner(**kw):
    def run(spec, mode, report_dir, log_path):
        return e2e_server.run_server(spec, mode, report_dir, log_path, timeout=30, command=_fake_command, **kw)

    return run


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_server_route_flag_md5_and_plugin_line(tmp_path, monkeypatch, capsys):
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_SERVER_CHILD_PID_FILE", str(pid_file))
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP", "1")  # must not reach the server: the flag is what is tested
    code = e2e.main(
        [
            "--server",
            "--prompt-format",
            "ids",
            "--vocab-size",
            "100",
            "--num-prompts",
            "3",
            "--max-new-tokens",
            "4",
            "--model-path",
            str(tmp_path),
            "--workdir",
            str(tmp_path / "w"),
        ],
        runner=_server_runner(),
    )
    out = capsys.readouterr().out
    assert code == e2e.EXIT_OK, out
    assert "-> EQUAL" in out and "engaged: YES" in out and "off as expected: yes" in out
    child = int(pid_file.read_text())
    assert not _alive(child), "the server's child process was left running"


def test_server_route_through_main_without_a_runner(tmp_path, monkeypatch, capsys):
    """--server itself picks the server runner (the fake stands in for launch_server)."""
    monkeypatch.setattr(e2e, "_cuda_problem", lambda kw: None)
    monkeypatch.setattr(
        e2e_server.run_server, "__kwdefaults__", dict(e2e_server.run_server.__kwdefaults__, command=_fake_command)
    )
    code = e2e.main(
        [
            "--server",
            "--prompt-format",
            "ids",
            "--vocab-size",
            "100",
            "--num-prompts",
            "2",
            "--max-new-tokens",
            "3",
            "--run-timeout",
            "30",
            "--model-path",
            str(tmp_path),
            "--workdir",
            str(tmp_path / "w"),
        ]
    )
    out = capsys.readouterr().out
    assert code == e2e.EXIT_OK, out
    assert "launch_server with --enable-mamba-conv-dedup" in out
    assert "server log: sglang-mamba-dedup 0.1.0 (SGLang fake" in out, "the server's own plugin line is shown"


def test_server_route_md5_differ_and_failed_start(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SERVER_DIFFER", "1")
    args = [
        "--server",
        "--prompt-format",
        "ids",
        "--vocab-size",
        "100",
        "--num-prompts",
        "2",
        "--max-new-tokens",
        "3",
        "--model-path",
        str(tmp_path),
    ]
    assert e2e.main(args + ["--workdir", str(tmp_path / "a")], runner=_server_runner()) == e2e.EXIT_MD5_DIFFER
    monkeypatch.delenv("FAKE_SERVER_DIFFER")
    monkeypatch.setenv("FAKE_SERVER_FAIL", "1")
    assert e2e.main(args + ["--workdir", str(tmp_path / "b")], runner=_server_runner()) == e2e.EXIT_RUN_FAILED
    assert "exited with 7 before it was healthy" in capsys.readouterr().out


def test_server_is_stopped_on_ctrl_c(tmp_path, monkeypatch):
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_SERVER_CHILD_PID_FILE", str(pid_file))
    started = {}

    def interrupted(base_url, spec, timeout):
        started["url"] = base_url
        raise KeyboardInterrupt

    monkeypatch.setattr(e2e_server, "generate", interrupted)
    spec = {
        "engine_kwargs": {},
        "prompts": [[1, 2]],
        "prompt_format": "ids",
        "batch_size": 1,
        "sampling_params": {"max_new_tokens": 2},
        "warmup_tokens": 0,
    }
    with pytest.raises(KeyboardInterrupt):
        e2e_server.run_server(spec, "on", tmp_path, tmp_path / "log", timeout=30, command=_fake_command)
    assert started and not _alive(int(pid_file.read_text()))


def test_base_urls_compare_md5_only(tmp_path, monkeypatch, capsys):
    procs = []
    urls = {}
    try:
        for mode in ("off", "on"):
            port = e2e_server.free_port()
            cmd = [sys.executable, FAKE_SERVER, "--port", str(port)] + (
                ["--enable-mamba-conv-dedup"] if mode == "on" else []
            )
            procs.append(
                subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
            urls[mode] = f"http://127.0.0.1:{port}"
        code = e2e.main(
            [
                "--base-url-off",
                urls["off"],
                "--base-url-on",
                urls["on"],
                "--prompt-format",
                "ids",
                "--vocab-size",
                "50",
                "--num-prompts",
                "2",
                "--max-new-tokens",
                "3",
                "--workdir",
                str(tmp_path / "w"),
            ]
        )
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
    out = capsys.readouterr().out
    assert code == e2e.EXIT_OK, out
    assert "-> EQUAL" in out and "not readable" in out and "engaged" not in out.split("plugin status")[1]
    with pytest.raises(SystemExit) as e:
        e2e.main(["--base-url-off", urls["off"]])
    assert e.value.code == 2
