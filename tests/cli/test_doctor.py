"""``sglang-mamba-dedup doctor``: its report and its exit codes."""

import json
import subprocess
import sys

import pytest

from sglang_mamba_dedup import env, versions
from sglang_mamba_dedup.cli import doctor

pytestmark = pytest.mark.release


def test_cli_report_on_this_machine():
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_mamba_dedup", "doctor", "--json"], capture_output=True, text=True, timeout=120
    )
    info = json.loads(proc.stdout)
    assert info["sglang"] == versions.installed_sglang_version()
    assert info["entry_point_registered"] is True
    assert info["upstream_dedup"] is versions.in_range(info["sglang"], versions.UPSTREAM_DEDUP)
    assert info["features"]["dedup_layout"]["would_apply"] is True
    assert info["features"]["commit"]["would_apply"] is True
    import torch

    if torch.cuda.is_available():
        assert proc.returncode == 0 and info["problems"] == []
    else:
        assert proc.returncode == 1
        assert any("no CUDA device" in p for p in info["problems"])


def _fake_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Fake H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))


def test_exit_zero_when_everything_can_engage(monkeypatch, capsys):
    _fake_cuda(monkeypatch)
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert "verdict: OK" in out and "Fake H200" in out
    assert "MambaPool.__init__" in out


def test_exit_one_on_unsupported_release(monkeypatch, capsys):
    _fake_cuda(monkeypatch)
    monkeypatch.setattr(versions, "installed_sglang_version", lambda: "0.5.30")
    assert doctor.main([]) == 1
    assert "outside the supported range" in capsys.readouterr().out


def test_exit_one_when_sglang_is_missing(monkeypatch, capsys):
    _fake_cuda(monkeypatch)
    monkeypatch.setattr(versions, "installed_sglang_version", lambda: None)
    assert doctor.main([]) == 1
    assert "SGLang is not installed" in capsys.readouterr().out


def test_exit_one_when_a_target_changed(monkeypatch, capsys):
    import dataclasses

    from sglang_mamba_dedup import installed
    from sglang_mamba_dedup.patcher import Patcher

    _fake_cuda(monkeypatch)
    broken = [
        dataclasses.replace(p, params=("renamed_arg",)) if p.name == "mamba_pool.init" else p
        for p in installed.PATCHER.table
    ]
    monkeypatch.setattr(installed, "PATCHER", Patcher(broken))
    assert doctor.main([]) == 1
    out = capsys.readouterr().out
    assert "renamed_arg" in out and "dedup_layout" in out


def test_exit_two_on_bad_switch_value(monkeypatch, capsys):
    _fake_cuda(monkeypatch)
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP", "maybe")
    assert doctor.main([]) == 2
    assert "accepted values" in capsys.readouterr().out


def test_doctor_does_not_wrap_anything(monkeypatch):
    from sglang_mamba_dedup import installed

    doctor.collect()
    assert installed.PATCHER.applied() == []


@pytest.mark.parametrize(
    "release,mode,code",
    [
        ("0.5.12", "back-port", 0),
        ("0.5.13.post1", "back-port", 0),
        ("0.5.15.post1", "take-over", 0),
        ("0.5.20", "take-over", 0),
        ("0.5.11", "not supported", 1),
    ],
)
def test_release_mode_for_an_uninstalled_release(release, mode, code, capsys):
    assert doctor.main(["--release", release]) == code
    out = capsys.readouterr().out
    assert mode in out and release in out


def test_doctor_prints_the_matrix_facts_of_the_installed_release(capsys):
    from sglang_mamba_dedup import versions
    from sglang_mamba_dedup.cli import evidence

    doctor.main([])
    out = capsys.readouterr().out
    cpu, gpu = evidence.EVIDENCE[versions.installed_sglang_version()]
    assert f"CPU CI: {cpu} pass; H200: {gpu}" in out


def test_cli_usage_errors_are_one_line_on_stderr(capsys):
    from sglang_mamba_dedup import cli

    assert cli.main(["bogus"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"error: unknown command 'bogus' (choose from {', '.join(cli.COMMANDS)})" in err
    assert "plan" in cli.COMMANDS
    assert cli.main(["--version", "x"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "--version takes no arguments" in err
    assert cli.main(["--version"]) == 0 and "sglang-mamba-dedup " in capsys.readouterr().out


@pytest.mark.parametrize("release,code", [("0.5.13.post1", 0), ("0.5.23.post1", 1), ("0.5.11", 1)])
def test_doctor_release_json(release, code, capsys):
    import json

    assert doctor.main(["--release", release, "--json"]) == code
    doc = json.loads(capsys.readouterr().out)
    assert doc["release"] == release and doc["supported"] is (code == 0)
    assert bool(doc["patches"]) is (code == 0) and (doc["problem"] is None) is (code == 0)


@pytest.mark.parametrize("value, known", [("commit_step0", True), ("no_such_fault", False)])
def test_doctor_names_a_set_fault_variable(monkeypatch, capsys, value, known):
    """``SGLANG_MAMBA_DEDUP_FAULT`` set: a line of its own right under the switch, a problem in the verdict (exit 1),
    and the same in the JSON report."""

    _fake_cuda(monkeypatch)
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP", "1")
    monkeypatch.setenv(env.FAULT, value)
    assert doctor.main([]) == 1
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("FAULT"))
    assert lines[at - 1].lstrip().startswith("switch") and f"{env.FAULT}={value} is set" in lines[at]
    assert "NEGATIVE CONTROL" in lines[at] and "strict mode refuses to start" in lines[at]
    verdict = next(i for i, ln in enumerate(lines) if ln.startswith("verdict"))
    assert any(ln.startswith("  - ") and env.FAULT in ln for ln in lines[verdict:])
    assert doctor.main(["--json"]) == 1
    info = json.loads(capsys.readouterr().out)
    assert info["fault"]["value"] == value and info["fault"]["known"] is known
    assert info["fault"]["problem"] in info["problems"]
    monkeypatch.delenv(env.FAULT)
    assert doctor.main([]) == 0 and "FAULT" not in capsys.readouterr().out


#: Runs one command with ``import triton`` failing, as a broken Triton install does (audit m-D1, m-D2, m-P9).
BROKEN_TRITON = """
import sys
sys.modules["triton"] = None  # import triton -> ImportError
from sglang_mamba_dedup.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _with_broken_triton(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BROKEN_TRITON, *argv], capture_output=True, text=True, timeout=300)


def test_doctor_with_a_broken_triton_names_the_cause_once():
    proc = _with_broken_triton("doctor", "--json")
    info = json.loads(proc.stdout)
    assert proc.returncode == 1
    sglang_problems = [p for p in info["problems"] if "SGLang" in p and "import" in p]
    assert len(sglang_problems) == 1 and "triton" in sglang_problems[0], info["problems"]
    assert not any("KeyError" in p for p in info["problems"]), info["problems"]  # no follow-on of the first
    assert all(f["reason"].startswith("not checked") for f in info["features"].values()), info["features"]


@pytest.mark.parametrize("command", [["demo"], ["plan", "--shape", "qwen3.5-0.8b", "--gpu-memory-gb", "80"]])
def test_demo_and_plan_with_a_broken_triton_say_it_in_one_line(command):
    proc = _with_broken_triton(*command)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "estimator failed" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "SGLang" in lines[0] and "does not import" in lines[0] and "triton" in lines[0], lines


def test_doctor_cuts_long_values_it_echoes(monkeypatch, capsys):
    """Audit 2026-12-04 m19 (and its FAULT twin): a 100,000-character switch or fault value was echoed whole in
    ``switch.raw`` and three times in the fault's entries; each is cut to 40 characters and its length."""
    _fake_cuda(monkeypatch)
    monkeypatch.setenv(env.SWITCH, "x" * 100_000)
    assert doctor.main(["--json"]) == 2
    out = capsys.readouterr().out
    assert len(out) < 20_000 and "(100000 characters)" in json.loads(out)["switch"]["raw"]
    monkeypatch.setenv(env.SWITCH, "1")
    monkeypatch.setenv(env.FAULT, "f" * 100_000)
    for argv in (["--json"], []):
        assert doctor.main(argv) == 1
        out = capsys.readouterr().out
        assert len(out) < 20_000 and "(100000 characters)" in out


def test_doctor_says_what_becomes_of_the_zero_copy_variable(monkeypatch, capsys):
    """Audit 2026-12-04: doctor said "zero-copy asked for" with the plugin off (the activation ignores the
    variable), listed no problem where zero-copy is asked for but not served (strict stops the launch there), said
    "feature zero_copy would apply" where it is not asked for, and "(... unset)" for a value that was set."""
    _fake_cuda(monkeypatch)
    monkeypatch.setenv(env.ZERO_COPY, "1")
    assert doctor.main(["--json"]) in (0, 1)
    info = json.loads(capsys.readouterr().out)
    assert info["zero_copy"]["ignored"] and "ignored" in info["zero_copy"]["ignored"]
    doctor.main([])
    assert "is ignored" in capsys.readouterr().out
    for switch in ("1", "strict"):
        monkeypatch.setenv(env.SWITCH, switch)
        monkeypatch.setenv(env.ZERO_COPY, "2")
        assert doctor.main(["--json"]) == 1
        info = json.loads(capsys.readouterr().out)
        assert info["zero_copy"]["not_served"] in info["problems"] and not info["zero_copy"]["ignored"]
        zc = info["features"]["zero_copy"]
        assert zc["would_apply"] is False and "'2' is not understood" in zc["reason"] and "unset" not in zc["reason"]
    monkeypatch.delenv(env.ZERO_COPY)
    assert doctor.main(["--json"]) == 0
    zc = json.loads(capsys.readouterr().out)["features"]["zero_copy"]
    assert zc["would_apply"] is False and zc["reason"].startswith(f"not asked for ({env.ZERO_COPY} unset or off)")


def test_doctor_release_marks_the_opt_in_targets(capsys):
    """``doctor --release 0.5.23`` listed zero-copy's targets among "Patched" as if always wrapped."""
    assert doctor.main(["--release", versions.ZERO_COPY_RELEASE]) == 0
    out = capsys.readouterr().out
    assert f"[zero_copy, only with {env.ZERO_COPY}=1]" in out
    assert doctor.main(["--release", versions.ZERO_COPY_RELEASE, "--json"]) == 0
    patches = json.loads(capsys.readouterr().out)["patches"]
    assert {p["feature"]: p["opt_in"] for p in patches}["zero_copy"] is True
    assert {p["feature"]: p["opt_in"] for p in patches}["commit"] is False


def test_doctor_says_once_which_resolved_settings_this_release_lacks(capsys):
    """Design review D10: ``doctor`` reads the settings table of :mod:`sglang_mamba_dedup.resolved`: where this
    release keeps each setting the plugin reads, and one line naming those it does not have (they read as absent)."""
    from sglang_mamba_dedup import resolved

    info = doctor.collect()
    settings = info["settings"]
    assert set(settings["where"]) == set(resolved.ROWS)
    assert settings["absent"] == [name for name, at in settings["where"].items() if at is None]
    version = versions.installed_sglang_version()
    if versions.in_range(version, versions.ZERO_COPY):
        assert settings["absent"] == [] and all(at.endswith(" bag") for at in settings["where"].values())
    if version in ("0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1"):
        assert "enable_flexkv" in settings["absent"]  # FlexKV arrived in 0.5.16
    line = [ln for ln in doctor.render(info).splitlines() if ln.lstrip().startswith("settings")]
    assert len(line) == 1 and line[0].endswith("absent on this release: " + (", ".join(settings["absent"]) or "none"))
