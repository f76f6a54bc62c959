"""The negative controls as data (issue 49): one table of named faults, applied and reverted by a ``Patcher`` (the
features' mechanism), one clear line for a name it does not know or a fault it cannot install, listed by ``doctor``.
Whether each fault changes the result: ``tests/integration/test_negative_control.py``,
``tests/integration/test_commit_route.py`` and ``tests/zero_copy/test_zero_copy_kernels.py``.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest

from sglang_mamba_dedup import env, report, versions
from sglang_mamba_dedup.cli import doctor
from sglang_mamba_dedup.patcher import Patcher, is_ours
from sglang_mamba_dedup.patches import commit as commit_patch
from sglang_mamba_dedup.patches import faults

VERSION = versions.installed_sglang_version()


def _wrapped(owner, attr: str) -> bool:
    return is_ours(vars(owner)[attr])


def test_every_fault_is_one_row_the_patcher_can_apply_here():
    assert list(faults.FAULTS) == [
        faults.COMMIT_STEP0,
        faults.ZC_NO_STAGE_IN,
        faults.ZC_NO_TRACK,
        faults.TRACK_COLUMN_LIVE,
    ]
    for name, fault in faults.FAULTS.items():
        assert fault.name == name and fault.breaks and set(fault.routes) <= set(faults.ROUTES), name
        patch = fault.patch
        assert (patch.name, patch.feature, patch.doc, patch.wrapper) == (name, name, fault.breaks, fault.breaks_with)
        selected, reason, per_patch = faults.PATCHER.check(name, any_release=True)
        assert selected == [patch] and reason is None and per_patch == {}, (name, reason)  # target and params hold


def test_install_and_remove_go_through_the_patcher(caplog):
    with caplog.at_level(logging.WARNING, logger="sglang_mamba_dedup"):
        faults.install(faults.COMMIT_STEP0)
        faults.install(faults.COMMIT_STEP0)  # idempotent
    assert faults.installed() == faults.COMMIT_STEP0 and faults.PATCHER.applied() == [faults.COMMIT_STEP0]
    assert _wrapped(commit_patch._Route, "commit") and report.events()["fault"] == faults.COMMIT_STEP0
    assert caplog.text.count("NEGATIVE CONTROL") == 1
    faults.remove()
    assert faults.installed() is None and not _wrapped(commit_patch._Route, "commit")
    assert "fault" not in report.events()
    faults.remove()  # a no-op


def test_an_unknown_fault_is_one_line_and_installs_nothing(monkeypatch, caplog):
    with pytest.raises(ValueError) as e:
        faults.install("commit_step1")
    msg = str(e.value)
    assert (
        "\n" not in msg
        and "'commit_step1' is not a known fault" in msg
        and "commit_step0, zc_no_stage_in, zc_no_track, track_column_live" in msg
    )
    monkeypatch.setenv(env.FAULT, "commit_step1")
    assert faults.install_from_env() is None and faults.installed() is None
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "commit_step1" in line and line.endswith("no fault installed")


def _table(monkeypatch, *rows: faults.Fault) -> None:
    table = {f.name: f for f in rows}
    monkeypatch.setattr(faults, "FAULTS", table)
    monkeypatch.setattr(faults, "PATCHER", Patcher(f.patch for f in table.values()))


def _never_valid(wrapped, instance, args, kwargs):
    return False


TOY = faults.Fault(
    "route_never_valid",
    breaks="every commit rebuilds its route",
    routes=faults.ROUTES,
    releases=str(versions.SUPPORTED),
    target=(commit_patch.__name__, "_Route.still_valid"),
    params=("linear_backend",),
    breaks_with=_never_valid,
)


def test_a_new_negative_control_is_one_row_and_one_break_function(monkeypatch):
    _table(monkeypatch, TOY)
    original = vars(commit_patch._Route)["still_valid"]
    faults.install("route_never_valid")
    route = commit_patch._Route(None, None, None, "test")
    assert route.still_valid(None) is False and _wrapped(commit_patch._Route, "still_valid")
    faults.remove()
    assert vars(commit_patch._Route)["still_valid"] is original


def test_a_fault_for_another_release_or_a_changed_target_is_one_line_and_installs_nothing(monkeypatch):
    elsewhere = dataclasses.replace(TOY, name="elsewhere", releases="==0.0.1")
    changed = dataclasses.replace(TOY, name="changed", params=("no_such_parameter",))
    _table(monkeypatch, elsewhere, changed)
    with pytest.raises(ValueError, match=r"the fault cannot be installed: it applies to SGLang ==0\.0\.1 only"):
        faults.install("elsewhere")
    with pytest.raises(ValueError, match="cannot be installed: feature 'changed' skipped.*no_such_parameter") as e:
        faults.install("changed")
    assert "\n" not in str(e.value)
    assert faults.installed() is None and not _wrapped(commit_patch._Route, "still_valid")


@pytest.mark.skipif(versions.in_range(VERSION, versions.ZERO_COPY), reason="zero-copy's own release")
def test_the_zero_copy_faults_refuse_other_releases():
    for name in (faults.ZC_NO_STAGE_IN, faults.ZC_NO_TRACK, faults.TRACK_COLUMN_LIVE):
        with pytest.raises(ValueError, match=f"applies to SGLang {versions.ZERO_COPY} only"):
            faults.install(name)
        assert faults.installed() is None


def test_the_track_faults_break_only_the_track_set():
    """The radix-on controls (docs/zero-copy.md §12.8), as their break functions hand the commit its arguments:
    ``zc_no_track`` drops the track set; ``track_column_live`` replaces each tracked step by the row's accepted step
    (untracked rows stay -1); the accept set, the cache and the rows pass unchanged; no track set stays none."""
    import torch

    calls = []

    def commit(cache, accept, track, rows):
        calls.append((cache, accept, track, rows))
        return "plan", "path"

    accept = (torch.tensor([2, 0, 1]), torch.tensor([5, 6, 7]))
    track = (torch.tensor([0, -1, 3]), torch.tensor([8, 9, 10]))
    rows = torch.tensor([3, 1, 2])
    no_track = faults.FAULTS[faults.ZC_NO_TRACK].breaks_with
    live = faults.FAULTS[faults.TRACK_COLUMN_LIVE].breaks_with
    assert no_track(commit, None, ("cache", accept, track, rows), {}) == ("plan", "path")
    assert calls[-1] == ("cache", accept, None, rows)
    live(commit, None, ("cache", accept), {"track": track, "rows": rows})
    cache, got_accept, (steps, slots), got_rows = calls[-1]
    assert steps.tolist() == [2, -1, 1] and slots is track[1] and got_accept is accept and got_rows is rows
    live(commit, None, ("cache", accept, None, rows), {})
    assert calls[-1][2] is None


def test_doctor_lists_the_faults(capsys):
    assert doctor.main(["--faults"]) == 0
    out = capsys.readouterr().out
    for fault in faults.FAULTS.values():
        assert fault.name in out and fault.breaks in out and fault.patch.target in out
    assert doctor.main(["--faults", "--json"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(faults.FAULTS) and rows[1]["routes"] == ["zero_copy"]
