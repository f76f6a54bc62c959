"""The switch, the entry point function and the launch flag, in this process."""

import argparse
import logging
import os
import pathlib

import pytest

from sglang_mamba_dedup import activation, env, installed, state, versions
from sglang_mamba_dedup.activation import Mode, SwitchError, parse_mode
from sglang_mamba_dedup.patcher import is_ours, resolve
from sglang_mamba_dedup.patches import PATCHES, SWITCHED_FEATURES

pytestmark = pytest.mark.release


def _wrapped_names():
    out = set()
    for p in PATCHES:
        try:
            parent, attr, raw = resolve(p.module, p.attr)
        except Exception:
            continue
        if is_ours(raw, p.name):
            out.add(p.name)
    return out


def _switched_patch_names():
    v = versions.installed_sglang_version()
    return {p.name for p in PATCHES if p.feature in SWITCHED_FEATURES and p.applies_to(v)}


@pytest.mark.parametrize(
    "raw,mode",
    [
        (None, Mode.OFF),
        ("", Mode.OFF),
        ("0", Mode.OFF),
        ("off", Mode.OFF),
        ("OFF", Mode.OFF),
        (" 1 ", Mode.ON),
        ("on", Mode.ON),
        ("On", Mode.ON),
        ("strict", Mode.STRICT),
        ("STRICT", Mode.STRICT),
    ],
    ids=lambda x: repr(x),
)
def test_accepted_values(raw, mode):
    assert parse_mode(raw) is mode


@pytest.mark.parametrize("raw", ["yes", "true", "2", "dedup", "o n"])
def test_bad_values_name_the_accepted_ones(raw):
    with pytest.raises(SwitchError) as e:
        parse_mode(raw)
    msg = str(e.value)
    assert repr(raw) in msg and "unset, 0, off, 1, on, strict" in msg


def test_bad_value_keeps_stock_path_with_one_error_line(monkeypatch, caplog):
    monkeypatch.setenv(env.SWITCH, "yes")
    with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        activation.register()  # must not raise: the loader would only swallow it
    assert _wrapped_names().isdisjoint(_switched_patch_names())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "accepted values" in errors[0].getMessage()


def test_off_wraps_nothing(monkeypatch):
    monkeypatch.setenv(env.SWITCH, "1")
    activation.register()
    assert _wrapped_names()
    monkeypatch.setenv(env.SWITCH, "0")
    activation.register()
    assert _wrapped_names() == set()
    assert "off" in activation.last_summary()


def test_on_wraps_every_switched_target_and_logs_one_line(monkeypatch, caplog):
    monkeypatch.setenv(env.SWITCH, "1")
    with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        activation.register()
        activation.register()  # re-entrant: same switch, same release -> nothing new, no second line
    assert _switched_patch_names() <= _wrapped_names()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert f"SGLang {versions.installed_sglang_version()}" in lines[0] and "applied" in lines[0]


def test_switching_off_again_reverts(monkeypatch):
    monkeypatch.setenv(env.SWITCH, "1")
    activation.register()
    monkeypatch.setenv(env.SWITCH, "off")
    activation.register()
    assert _wrapped_names().isdisjoint(_switched_patch_names())


def test_unsupported_release_skips_everything(monkeypatch, caplog):
    monkeypatch.setenv(env.SWITCH, "1")
    monkeypatch.setattr(versions, "installed_sglang_version", lambda: "0.5.9")
    with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        activation.register()
    assert not _wrapped_names()
    assert "outside the supported range" in activation.last_summary()


def test_strict_on_unsupported_release_stops_the_launch(monkeypatch):
    monkeypatch.setenv(env.SWITCH, "strict")
    monkeypatch.setattr(versions, "installed_sglang_version", lambda: "0.5.9")
    with pytest.raises(SystemExit) as e:
        activation.register()
    assert "strict" in str(e.value) and "0.5.9" in str(e.value)
    assert not _wrapped_names()


def test_strict_with_a_skipped_feature_stops_and_leaves_nothing_wrapped(monkeypatch):
    import dataclasses

    from sglang_mamba_dedup.patcher import Patcher

    broken = [
        dataclasses.replace(p, attr="MambaPool.no_such_method") if p.name == "mamba_pool.init" else p for p in PATCHES
    ]
    monkeypatch.setattr(installed, "PATCHER", Patcher(broken))
    monkeypatch.setenv(env.SWITCH, "strict")
    with pytest.raises(SystemExit) as e:
        activation.register()
    assert "dedup_layout" in str(e.value) and "no_such_method" in str(e.value)
    assert not installed.PATCHER.applied(feature="commit"), "strict failure left features wrapped"
    # the same breakage with plain "on": logged, the other features stay applied
    state.reset()
    monkeypatch.setenv(env.SWITCH, "on")
    activation.register()
    assert "skipped: dedup_layout" in activation.last_summary()
    assert installed.PATCHER.applied(feature="commit")
    installed.PATCHER.revert()


def test_launch_flag_on_the_command_line_switches_on(monkeypatch):
    from sglang.srt.server_args import ServerArgs

    monkeypatch.setattr("sys.argv", ["sglang.launch_server", "--model-path", "m", "--enable-mamba-conv-dedup"])
    activation.register()  # what SGLang's load_plugins() does before it parses the command line
    assert os.environ[env.SWITCH] == "1", "children would not inherit the switch"
    assert _switched_patch_names() | {"server_args.add_cli_args", "server_args.from_cli_args"} <= _wrapped_names()
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(["--model-path", "dummy", "--enable-mamba-conv-dedup"])
    assert ns.enable_mamba_conv_dedup is True
    assert "--enable-mamba-conv-dedup given" in activation.last_summary()


def test_launch_flag_with_a_bad_switch_value_keeps_the_launch_going(monkeypatch):
    """The flag never takes a launch down: with SGLANG_MAMBA_DEDUP=garbage the plugin stays off (one ERROR
    line), but SGLang's parser still accepts the flag."""
    from sglang.srt.server_args import ServerArgs

    monkeypatch.setenv(env.SWITCH, "garbage")
    monkeypatch.setattr("sys.argv", ["sglang.launch_server", "--model-path", "m", "--enable-mamba-conv-dedup"])
    activation.register()
    assert not (_switched_patch_names() & _wrapped_names()), "a bad value must keep the plugin off"
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    assert parser.parse_args(["--model-path", "dummy", "--enable-mamba-conv-dedup"]).enable_mamba_conv_dedup is True
    assert "accepted and ignored" in activation.last_summary() and "not understood" in activation.last_summary()


def test_parsed_flag_sets_the_env_var_when_argv_did_not_show_it(monkeypatch):
    """A caller that builds the argv list itself: from_cli_args is the second guard."""
    from sglang.srt.server_args import ServerArgs

    monkeypatch.setenv(env.SWITCH, "1")
    activation.register()
    monkeypatch.delenv(env.SWITCH)
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ServerArgs.from_cli_args(parser.parse_args(["--model-path", "dummy", "--enable-mamba-conv-dedup"]))
    assert os.environ[env.SWITCH] == "1"
    assert _switched_patch_names() <= _wrapped_names()


def test_launch_flag_keeps_strict(monkeypatch):
    monkeypatch.setattr("sys.argv", ["sglang", "--enable-mamba-conv-dedup"])
    monkeypatch.setenv(env.SWITCH, "strict")
    activation.register()
    assert os.environ[env.SWITCH] == "strict"


def test_without_the_flag_nothing_changes(monkeypatch):
    from sglang.srt.server_args import ServerArgs

    monkeypatch.setattr("sys.argv", ["sglang.launch_server", "--model-path", "m"])
    activation.register()
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    assert "--enable-mamba-conv-dedup" not in parser._option_string_actions
    assert env.SWITCH not in os.environ
    assert not _wrapped_names()


def test_report_file_is_written_with_status_and_events(monkeypatch, tmp_path):
    import json

    from sglang_mamba_dedup import report

    monkeypatch.setenv(env.REPORT_DIR, str(tmp_path))
    monkeypatch.setenv(env.SWITCH, "1")
    activation.register()
    report.record_layout("ours", None, dense_bytes=1200, physical_bytes=700)
    for _ in range(3):
        report.count_commit(ours=True)
    data = json.loads(pathlib.Path(report.report_path(str(tmp_path))).read_text())
    assert data["mode"] == "on" and data["sglang_version"] == versions.installed_sglang_version()
    assert data["events"]["dedup_layout"]["physical_bytes"] == 700
    assert data["events"]["commit_calls"] == 2, "rewritten at the 1st, 2nd, 4th ... commit only"
    assert data["patches"]["mamba_pool.init"]["state"] == "applied"
    report.write()
    assert json.loads(pathlib.Path(report.report_path(str(tmp_path))).read_text())["events"]["ours_commit_calls"] == 3


def test_what_if_register_patches_without_report_or_fault(monkeypatch, tmp_path):
    """``register(what_if=True)`` (the what-if CLIs): the patches as the switch says, but no status file and no
    fault; a real ``register()`` afterwards, same switch, still writes the report and installs the fault."""
    from sglang_mamba_dedup.patches import faults

    monkeypatch.setenv(env.SWITCH, "1")
    monkeypatch.setenv(env.FAULT, faults.COMMIT_STEP0)
    monkeypatch.setenv(env.REPORT_DIR, str(tmp_path))
    activation.register(what_if=True)
    assert _switched_patch_names() <= _wrapped_names()
    assert list(tmp_path.iterdir()) == [] and faults.installed() is None
    activation.register()
    assert faults.installed() == faults.COMMIT_STEP0
    assert [p.name for p in tmp_path.glob("status-*.json")], "the real activation wrote no report"


def test_zero_copy_flag_switches_on_and_asks_for_zero_copy(monkeypatch):
    """``--enable-mamba-zero-copy-commit`` alone: the plugin on, zero-copy asked for in the environment the
    schedulers inherit, its features applied (0.5.23; the Mamba2 bindings exist on CUDA only), SGLang's parser
    accepts the flag, and from_cli_args sets both variables for a caller that built argv itself."""
    from sglang.srt.server_args import ServerArgs

    monkeypatch.delenv(env.ZERO_COPY, raising=False)
    monkeypatch.setattr("sys.argv", ["sglang.launch_server", "--model-path", "m", env.ZERO_COPY_FLAG])
    activation.register()
    assert os.environ[env.SWITCH] == "1" and os.environ[env.ZERO_COPY] == "1"
    zero_copy_patches = {p.name for p in PATCHES if p.feature == "zero_copy"}
    if versions.in_range(versions.installed_sglang_version(), versions.ZERO_COPY):
        assert zero_copy_patches <= _wrapped_names() and "zero_copy" in activation.last_summary()
    else:
        assert not zero_copy_patches & _wrapped_names()
        assert f"built for SGLang {versions.ZERO_COPY_RELEASE} only" in activation.last_summary()
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    monkeypatch.delenv(env.SWITCH)
    monkeypatch.delenv(env.ZERO_COPY)
    ServerArgs.from_cli_args(parser.parse_args(["--model-path", "dummy", env.ZERO_COPY_FLAG]))
    assert os.environ[env.SWITCH] == "1" and os.environ[env.ZERO_COPY] == "1"


def test_zero_copy_not_asked_for_is_not_applied(monkeypatch):
    monkeypatch.setenv(env.SWITCH, "1")
    activation.register()
    assert not {p.name for p in PATCHES if p.feature.startswith("zero_copy")} & _wrapped_names()
    assert "zero_copy" not in activation.last_summary()


def test_revert_then_a_new_activation_applies_again(monkeypatch):
    """m-S3 of the second audit: ``revert()`` then ``register()`` with the same switch re-applied nothing while the
    state still said "on"."""
    import sglang_mamba_dedup as smd

    monkeypatch.setenv(env.SWITCH, "1")
    activation.register()
    assert installed.PATCHER.applied("commit")
    smd.revert(force=True)
    assert not installed.PATCHER.applied() and activation.current_mode() is Mode.OFF
    activation.register()
    assert installed.PATCHER.applied("commit") and activation.current_mode() is Mode.ON


def test_a_switch_not_understood_is_not_overridden_by_the_flag(monkeypatch):
    """m-S1 of the second audit: ``SGLANG_MAMBA_DEDUP=maybe`` plus the flag: the activation says the variable wins
    (off); SGLang's argument parsing must not then set it to 1 for the schedulers."""
    from sglang.srt.server_args import ServerArgs

    monkeypatch.setenv(env.SWITCH, "maybe")
    monkeypatch.setattr("sys.argv", ["sglang.launch_server", "--model-path", "m", env.FLAG])
    activation.register()
    assert "is not understood" in activation.last_summary()
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ServerArgs.from_cli_args(parser.parse_args(["--model-path", "dummy", env.FLAG]))
    assert os.environ[env.SWITCH] == "maybe"


def _applied_features():
    return {v["feature"] for v in installed.status().values() if v["state"] == "applied"}


@pytest.mark.parametrize("how", ["apply()", "switch on"])
def test_an_in_process_plan_leaves_the_activation_as_it_found_it(how, monkeypatch, capsys):
    """Audit m-S4: ``plan`` (and ``demo``) switch the plugin for a what-if in this process; afterwards the
    features, the mode and the activation key are those of before, whether ``apply()`` or the switch made them."""
    import sglang_mamba_dedup
    from sglang_mamba_dedup.planner import plan

    if how == "apply()":
        monkeypatch.delenv(env.SWITCH, raising=False)
        sglang_mamba_dedup.apply()
        activation.register()  # SGLang's loader after apply(): an unset switch keeps its patches
    else:
        monkeypatch.setenv(env.SWITCH, "1")
        activation.register()
    before = (_applied_features(), state.STATE.mode, state.STATE.activation_key, _wrapped_names())
    assert before[0], "nothing applied: the test could not fail"
    assert plan.main(["--shape", "qwen3.5-0.8b", "--gpu-memory-gb", "80"]) == 0
    after = (_applied_features(), state.STATE.mode, state.STATE.activation_key, _wrapped_names())
    assert after == before


def test_the_activation_line_names_the_flag_given(monkeypatch):
    """Audit 2026-12-04: ``--enable-mamba-zero-copy-commit`` alone was logged as ``[--enable-mamba-conv-dedup
    given]``, a flag the operator never typed."""
    monkeypatch.delenv(env.ZERO_COPY, raising=False)
    monkeypatch.setattr("sys.argv", ["sglang.launch_server", "--model-path", "m", env.ZERO_COPY_FLAG])
    activation.register()
    assert f"[{env.ZERO_COPY_FLAG} given]" in activation.last_summary()
    assert env.FLAG not in activation.last_summary().split(": ")[0]


def test_strict_mode_cuts_a_long_fault_value(monkeypatch):
    """Audit 2026-12-04: strict mode's refusal of a set fault echoed the whole value (100,000 characters)."""
    monkeypatch.setenv(env.SWITCH, "strict")
    monkeypatch.setenv(env.FAULT, "f" * 100_000)
    with pytest.raises(SystemExit) as exc:
        activation.register()
    assert len(str(exc.value)) < 1_000 and "(100000 characters)" in str(exc.value)


def test_flags_in_argv_asks_and_export_flags_acts(monkeypatch):
    """Design review D7: the question (which flags) writes nothing; the one translation of the flags into the
    environment (``env.export_flags``) is the activation's and SGLang's ``from_cli_args``'s."""
    import ast
    import inspect

    from sglang_mamba_dedup.patches import launch_flag

    monkeypatch.delenv(env.ZERO_COPY, raising=False)
    monkeypatch.delenv(env.SWITCH, raising=False)
    monkeypatch.setattr("sys.argv", ["sglang.launch_server", env.ZERO_COPY_FLAG, "--model-path", "m", env.FLAG])
    assert activation.flags_in_argv() == (env.FLAG, env.ZERO_COPY_FLAG)
    assert env.ZERO_COPY not in os.environ and env.SWITCH not in os.environ  # a question only
    cases = {None: ("1", ""), "0": ("1", "0"), "off": ("1", "off"), "on": ("on", None), "strict": ("strict", None)}
    cases["maybe"] = ("maybe", None)  # not understood: the variable wins, the plugin stays off everywhere
    for before, (after, replaced) in cases.items():
        if before is None:
            monkeypatch.delenv(env.SWITCH, raising=False)
        else:
            monkeypatch.setenv(env.SWITCH, before)
        monkeypatch.delenv(env.ZERO_COPY, raising=False)
        assert env.export_flags((env.ZERO_COPY_FLAG,)) == replaced, before
        assert (os.environ.get(env.SWITCH), os.environ[env.ZERO_COPY]) == (after, "1"), before
    monkeypatch.delenv(env.SWITCH)
    monkeypatch.delenv(env.ZERO_COPY)
    assert env.export_flags((env.FLAG,), switch=False) is None and env.SWITCH not in os.environ
    assert env.export_flags(()) is None and env.SWITCH not in os.environ and env.ZERO_COPY not in os.environ
    for fn in (activation, launch_flag):  # neither writes the two variables itself
        writes = [
            ast.unparse(t)
            for node in ast.walk(ast.parse(inspect.getsource(fn)))
            if isinstance(node, ast.Assign)
            for t in node.targets
            if isinstance(t, ast.Subscript) and "environ" in ast.unparse(t.value)
        ]
        assert not writes, (fn.__name__, writes)
