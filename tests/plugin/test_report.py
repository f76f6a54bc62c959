"""The status report file: written atomically, never through a planted link, never raising."""

import json
import os
import pathlib

import pytest

from sglang_mamba_dedup import env, report


@pytest.fixture
def report_dir(monkeypatch, tmp_path):
    d = tmp_path / "reports"
    d.mkdir()
    monkeypatch.setenv(env.REPORT_DIR, str(d))
    return d


def _check_report(report_dir, written):
    path = pathlib.Path(report.report_path(str(report_dir)))
    assert written == str(path)
    assert path.is_file() and not path.is_symlink(), "the report must be a regular file of its own"
    data = json.loads(path.read_text())
    assert data["pid"] == os.getpid() and data["events"]["commit_calls"] == 0
    return path


@pytest.mark.parametrize("planted", ["temp_name", "final_name"])
def test_report_write_never_follows_a_planted_symlink(report_dir, tmp_path, planted):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    name = pathlib.Path(report.report_path(str(report_dir))).name + (".tmp" if planted == "temp_name" else "")
    (report_dir / name).symlink_to(victim)
    written = report.write()
    assert victim.read_text() == "precious\n", "the report wrote through a symlink"
    assert not victim.is_symlink()
    _check_report(report_dir, written)
    leftovers = {p.name for p in report_dir.iterdir()} - {pathlib.Path(report.report_path(str(report_dir))).name, name}
    assert not leftovers, f"temporary files left behind: {leftovers}"


def test_report_write_rewrites_and_leaves_no_temp_files(report_dir):
    path = _check_report(report_dir, report.write())
    report.count_commit(ours=True)  # the 1st commit writes again, over the previous report
    assert json.loads(path.read_text())["events"]["ours_commit_calls"] == 1
    assert [p.name for p in report_dir.iterdir()] == [path.name]


@pytest.mark.parametrize("failure", ["snapshot", "replace"])
def test_report_write_failure_never_raises_and_cleans_up(report_dir, monkeypatch, failure):
    def boom(*a, **k):
        raise OSError("injected")

    if failure == "snapshot":
        monkeypatch.setattr(report, "snapshot", boom)
    else:
        monkeypatch.setattr(report.os, "replace", boom)
    assert report.write() is None
    assert list(report_dir.iterdir()) == [], "a failed write left a file behind"


@pytest.mark.parametrize("blank", [" ", "\t"])
def test_a_blank_report_dir_writes_nothing_and_makes_no_folder(monkeypatch, tmp_path, blank):
    """m-S2 of the second audit: a blank value is no directory (it made a folder named " " in the cwd)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(env.REPORT_DIR, blank)
    assert report.write() is None
    assert list(tmp_path.iterdir()) == []


def test_counters_are_counted_through_the_report_under_their_declared_names():
    from sglang_mamba_dedup import state

    for name in state.ZERO_COPY_COUNTERS:
        assert name not in report.events()  # present once counted
    report.count("zc_stage_in_calls")
    report.count("zc_stage_in_calls")
    report.count_launch("direct")
    report.count_launch(None)  # a launch that reported no path: nothing counted
    assert report.events()["zc_stage_in_calls"] == 2 and state.STATE.launches == {"direct": 1, "triton": 0}
    with pytest.raises(ValueError, match="not a declared counter"):
        report.count("zc_typo_calls")
    with pytest.raises(ValueError, match="not a launch path"):
        report.count_launch("cuda")
    assert "zc_typo_calls" not in report.events()


def test_a_commit_counts_its_launch_path_with_it_and_the_report_publishes_the_launches():
    """One call, one lock, per verify commit: the commit's counters and its kernel's launch path (issue 49, D5)."""
    from sglang_mamba_dedup import state

    report.count_commit(ours=True, zero_copy=True, path="direct")
    report.count_commit(ours=True, track=True, path="triton")
    report.count_commit(ours=False, track=True)  # SGLang's own commit: no launch of ours
    with pytest.raises(ValueError, match="not a launch path"):
        report.count_commit(ours=True, path="cuda")
    events = report.events()
    assert (events["commit_calls"], events["ours_commit_calls"], events["zc_commit_calls"]) == (3, 2, 1)
    assert (events["track_commit_calls"], events["ours_track_commit_calls"]) == (2, 1)
    assert state.STATE.launches == report.launches() == report.snapshot()["launches"] == {"direct": 1, "triton": 1}


def test_a_report_dir_with_a_tilde_is_the_home_folder(monkeypatch, tmp_path):
    """Audit 2026-12-04: ``SGLANG_MAMBA_DEDUP_REPORT_DIR=~/reports`` (quoted, a systemd unit, a YAML env block: no
    shell expanded it) made a folder named ``~`` in the working directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(env.REPORT_DIR, "~/reports")
    written = report.write()
    assert written is not None and pathlib.Path(written).parent == tmp_path / "home" / "reports"
    assert not (tmp_path / "~").exists()
