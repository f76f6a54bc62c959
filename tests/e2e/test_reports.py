"""The e2e driver's reading of the plugin's status reports: engaged, off, their descriptions."""

import json

import pytest

from sglang_mamba_dedup import report
from sglang_mamba_dedup.e2e import reports as e2e_reports
from tests.support.e2e import status_report, write_reports


def test_read_reports_skips_foreign_and_broken_files(tmp_path):
    write_reports(tmp_path, [status_report(11), status_report(12)])
    (tmp_path / "status-13.json").write_text("{not json")
    (tmp_path / "status-14.json").write_text(json.dumps({"no": "pid"}))
    (tmp_path / "other.json").write_text("{}")
    reports, problems = e2e_reports.read_reports(tmp_path)
    assert [r["pid"] for r in reports] == [11, 12]
    assert len(problems) == 2
    assert e2e_reports.read_reports(tmp_path / "missing") == ([], [])


def test_engaged_from_scheduler_report():
    ok, reasons, rep = e2e_reports.check_engaged(
        [status_report(100, state=None, calls=0, ours=0), status_report(200)], parent_pid=100
    )
    assert ok, reasons
    assert rep["pid"] == 200
    ok, reasons, _ = e2e_reports.check_engaged([status_report(200, state="upstream")], parent_pid=100)
    assert ok, reasons


@pytest.mark.parametrize(
    "reports, needle",
    [
        ([], "no status report"),
        ([status_report(100)], "only the engine's own process"),  # the parent's report does not count
        ([status_report(100), status_report(200, state=None)], "no dedup_layout"),
        ([status_report(200, state="stock")], "layout is 'stock'"),
        ([status_report(200, dense=2048, physical=2048)], "no bytes saved"),
        ([status_report(200, ours=0)], "no commit ran through our kernels"),
        ([status_report(200, mode="off")], "mode is 'off'"),
        ([status_report(200), status_report(201, ours=0)], "pid 201"),  # every rank must engage
    ],
    ids=["missing", "parent-only", "no-pool", "stock", "no-bytes", "no-ours-commit", "mode-off", "one-rank"],
)
def test_not_engaged(reports, needle):
    ok, reasons, _ = e2e_reports.check_engaged(reports, parent_pid=100)
    assert not ok
    assert any(needle in r for r in reasons), reasons


def test_off_run_check():
    assert e2e_reports.check_off([], 100) == (True, [])
    assert e2e_reports.check_off([status_report(200, mode="off", state="upstream", ours=0)], 100)[0]
    assert e2e_reports.check_off([status_report(100, mode="on")], 100)[
        0
    ]  # the parent's own report is not the scheduler's
    ok, reasons = e2e_reports.check_off([status_report(200, mode="off", ours=3)], 100)
    assert not ok and "3 commits" in reasons[0]


def test_describe_report():
    text = e2e_reports.describe_report(status_report(200, calls=10, ours=9, track=4, ours_track=3))
    assert "saved 2,048 (50.0%)" in text and "pool=applied" in text
    assert "our kernel / all: 9/10; with track slots 3/4, without 6/6" in text
    assert e2e_reports.describe_report(None) == "no scheduler report"


def test_commit_counts_tolerate_old_and_broken_reports():
    assert e2e_reports.commit_counts(None) == dict.fromkeys(report.COUNTERS, 0)
    old = {"pid": 1, "events": {"commit_calls": 5, "ours_commit_calls": "x"}}  # before the track counters
    assert e2e_reports.commit_counts(old) == {
        "commit_calls": 5,
        "ours_commit_calls": 0,
        "track_commit_calls": 0,
        "ours_track_commit_calls": 0,
    }


def test_track_proof_in_the_engagement_check():
    rep = status_report(200, track=8, ours_track=0)
    assert e2e_reports.check_engaged([rep], 100)[0]  # not required: engaged
    ok, reasons, _ = e2e_reports.check_engaged([rep], 100, expect_track=True)
    assert not ok and "no commit with track slots ran through our kernel (8 commits with track slots" in reasons[0]
    assert e2e_reports.check_engaged([status_report(200, track=8, ours_track=8)], 100, expect_track=True)[0]
    # every rank must show it
    ok, reasons, _ = e2e_reports.check_engaged(
        [status_report(200), status_report(201, ours_track=0)], 100, expect_track=True
    )
    assert not ok and reasons[0].startswith("pid 201")


def test_every_tp_rank_must_report_an_engaged_pool():
    """TP=2: two scheduler processes, each with its own pool and commit. A rank whose scheduler wrote no report
    (or built its pool without the plugin) fails the check, even when the other rank engaged."""
    assert e2e_reports.expected_ranks({"tp_size": 2}) == 2
    assert e2e_reports.expected_ranks({"tp_size": 2, "pp_size": 2}) == 4
    assert e2e_reports.expected_ranks(None) == e2e_reports.expected_ranks({"tp_size": None}) == 1
    both = [status_report(100, state=None, calls=0, ours=0), status_report(200), status_report(201)]
    ok, reasons, _ = e2e_reports.check_engaged(both, parent_pid=100, expect_ranks=2)
    assert ok, reasons
    one = [status_report(100, state=None, calls=0, ours=0), status_report(200)]
    ok, reasons, _ = e2e_reports.check_engaged(one, parent_pid=100, expect_ranks=2)
    assert not ok and any("only 1 of 2 scheduler processes" in r for r in reasons), reasons
    no_pool = [*one, status_report(201, state=None)]  # rank 1's pool built without the plugin
    ok, reasons, _ = e2e_reports.check_engaged(no_pool, parent_pid=100, expect_ranks=2)
    assert not ok
    assert e2e_reports.check_engaged(one, parent_pid=100)[0], "a single-GPU run still needs one rank"
