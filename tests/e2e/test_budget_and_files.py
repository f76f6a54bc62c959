"""The call's bounds and files (audit m22 to m26): a budget that leaves no timed pair fails; --json-out and
--csv-out never follow a link and are not one file; an uncreatable --workdir is a usage error; the temporary
workdir goes after a PASS and is kept, and named, after a failure."""

import json
import os
import tempfile
from pathlib import Path

import pytest

from sglang_mamba_dedup.e2e import cli, verdict, workload
from tests.e2e.test_paired import _args as _throughput_args
from tests.support.e2e import FakeEngine

ARGS = ["--prompt-format", "ids", "--vocab-size", "50", "--num-prompts", "2", "--max-new-tokens", "4"]


def test_a_budget_with_no_timed_pair_fails(tmp_path, fake_servers, capsys):
    code = cli.main(_throughput_args(tmp_path, "--time-budget", "5"))
    out = capsys.readouterr().out
    assert code == verdict.EXIT_RUN_FAILED, out
    assert "no timed pair ran (--time-budget)" in out.splitlines()[-1]


def test_the_outputs_never_follow_a_link(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    for opt in ("--json-out", "--csv-out"):
        link = tmp_path / f"link{opt}"
        link.symlink_to(victim)
        with pytest.raises(SystemExit) as exc:
            cli.main(["--server", "--throughput", opt, str(link), "--workdir", str(tmp_path / "w")])
        assert exc.value.code == 2 and "is a symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "keep me"


def test_a_link_planted_during_the_run_is_not_followed(tmp_path, capsys):
    victim, out = tmp_path / "victim.txt", tmp_path / "s.json"
    victim.write_text("keep me")

    def runner(spec, mode, report_dir, log_path):
        if not out.is_symlink():
            out.symlink_to(victim)
        return _fake_run(spec)

    argv = ARGS + ["--modes", "off,off", "--json-out", str(out), "--workdir", str(tmp_path / "w")]
    code = cli.main(argv, runner=runner)
    printed = capsys.readouterr().out
    assert victim.read_text() == "keep me"
    assert f"--json-out {out}: not written (OSError" in printed
    # m-E4 of the second audit: a result promised and not written is never PASS / exit 0
    assert code == verdict.EXIT_NOT_WRITTEN and "RESULT: FAIL" in printed and "RESULT: PASS" not in printed


def test_an_unwritable_json_out_fails_the_call(tmp_path, capsys):
    """m-E4: ``--json-out /dev/full`` (every write fails) printed "not written", then PASS with exit 0."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    argv = ARGS + ["--modes", "off,off", "--json-out", "/dev/full", "--workdir", str(tmp_path / "w")]
    code = cli.main(argv, runner=lambda spec, mode, report_dir, log_path: _fake_run(spec))
    printed = capsys.readouterr().out
    assert code == verdict.EXIT_NOT_WRITTEN, printed
    assert "--json-out /dev/full not written" in printed and "RESULT: PASS" not in printed


def test_json_and_csv_out_the_same_file(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--server", "--throughput", "--csv-out", "x.out", "--json-out", "./x.out"])
    assert exc.value.code == 2 and "are the same file" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["file/sub", "/proc/smd-e2e-test"])
def test_an_uncreatable_workdir_is_a_usage_error(where, tmp_path, capsys, no_build):
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as exc:
        cli.main(ARGS + ["--workdir", str(tmp_path / where) if where.startswith("file") else where])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "cannot be created" in err[0], err


def test_an_existing_read_only_workdir_is_a_usage_error(capsys, no_build):
    """m-E7 of the second audit: ``--workdir /sys/fs`` (exists, read-only even for root) ended in a traceback, rc 1."""
    if not os.path.isdir("/sys/fs") or os.access("/sys/fs", os.W_OK) and _writable("/sys/fs"):
        pytest.skip("no read-only /sys/fs here")
    with pytest.raises(SystemExit) as exc:
        cli.main(ARGS + ["--workdir", "/sys/fs"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "not writable" in err[0], err


def _writable(folder: str) -> bool:
    try:
        fd, probe = tempfile.mkstemp(dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


def _fake_run(spec, differ=False):
    engine = FakeEngine(differ_prompt=spec["prompts"][0] if differ else None)
    return {"ok": True, "pid": 1, **workload.run_plan(spec, engine.generate, engine.flush)}


@pytest.fixture
def temp_root(tmp_path, monkeypatch):
    """tempfile's folder for this test (the temporary workdirs are made there)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def test_the_temporary_workdir_goes_after_a_pass(temp_root, capsys):
    code = cli.main(ARGS + ["--modes", "off,off"], runner=lambda spec, *a: _fake_run(spec))
    assert code == verdict.EXIT_OK, capsys.readouterr().out
    assert list(temp_root.iterdir()) == []


def test_the_temporary_workdir_stays_after_a_failure_and_is_named(temp_root, tmp_path, capsys):
    runs = iter([False, True])
    code = cli.main(
        ARGS + ["--modes", "off,off", "--json-out", str(tmp_path / "s.json")],
        runner=lambda spec, *a: _fake_run(spec, differ=next(runs)),
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == verdict.EXIT_MD5_DIFFER
    (kept,) = temp_root.iterdir()
    assert kept.name.startswith("smd-e2e-") and (kept / "reports-0-off").is_dir()
    assert lines[-2].startswith(f"the logs are kept in {kept} ") and lines[-1].startswith("RESULT: FAIL")
    assert json.loads((tmp_path / "s.json").read_text())["exit_code"] == 1
    assert os.path.realpath(kept).startswith(str(temp_root))


def test_a_given_workdir_stays_after_a_pass(tmp_path, capsys):
    code = cli.main(ARGS + ["--modes", "off,off", "--workdir", str(tmp_path / "w")], runner=lambda s, *a: _fake_run(s))
    assert code == verdict.EXIT_OK and Path(tmp_path / "w" / "reports-0-off").is_dir()
    assert "the logs are kept" not in capsys.readouterr().out
