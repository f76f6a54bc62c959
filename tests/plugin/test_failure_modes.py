"""What happens when... (README table): each case of the failure-modes issue, checked by its effect."""

import argparse
import gc
import importlib
import logging
import os
import sys

import pytest

import sglang_mamba_dedup
from sglang_mamba_dedup import activation, env, installed, state, versions
from sglang_mamba_dedup.patcher import is_ours
from sglang_mamba_dedup.patches import SWITCHED_FEATURES
from sglang_mamba_dedup.patches import commit as commit_patch
from sglang_mamba_dedup.state import STATE

pytestmark = pytest.mark.release


def _parser_accepts_flag():
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(["--model-path", "m", "--enable-mamba-conv-dedup"]).enable_mamba_conv_dedup


# 1. the launch flag never takes a launch down, whatever the release -------------------------------------
@pytest.mark.parametrize("fake", ["0.5.24", "0.5.11", "not-a-version"])
def test_flag_with_a_release_outside_the_range_is_accepted_and_said_once(monkeypatch, caplog, fake):
    monkeypatch.setattr(versions, "installed_sglang_version", lambda: fake)
    monkeypatch.setattr(sys, "argv", ["sglang.launch_server", "--model-path", "m", "--enable-mamba-conv-dedup"])
    with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        activation.register()
        assert _parser_accepts_flag() is True
        from sglang.srt.server_args import ServerArgs

        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        try:  # older releases build ServerArgs only where an accelerator exists: our part runs before that
            ServerArgs.from_cli_args(parser.parse_args(["--model-path", "m", "--enable-mamba-conv-dedup"]))
        except (RuntimeError, NotImplementedError):
            pass
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "off, nothing patched" in warnings[0] and "accepted and ignored" in warnings[0]
    assert set(installed.PATCHER.applied()) == {"server_args.add_cli_args", "server_args.from_cli_args"}


def test_newer_release_is_off_with_one_warning_and_can_be_allowed(monkeypatch, caplog):
    monkeypatch.setattr(versions, "installed_sglang_version", lambda: "0.5.24")
    monkeypatch.setenv(env.SWITCH, "1")
    with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        activation.register()
    assert not installed.PATCHER.applied()
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert env.ALLOW_UNTESTED in caplog.records[0].getMessage()
    # opted in: patched as the newest tested release, every target checked, said to be untested
    caplog.clear()
    state.reset()
    monkeypatch.setenv(env.ALLOW_UNTESTED, "1")
    with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        activation.register()
    assert "commit" in {installed.PATCHER.table[0].feature} | {
        p.feature for p in installed.PATCHER.table if p.name in installed.PATCHER.applied()
    }
    assert installed.PATCHER.applied("commit") and installed.PATCHER.applied("dedup_layout")
    (line,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "UNTESTED" in line.getMessage()


# 3. a kernel that does not import: tried once, said once, doctor sees it ----------------------------------
def test_kernel_import_failure_is_remembered_logged_once_and_seen_by_doctor(monkeypatch, caplog):
    attempts = []

    class _Broken:  # a meta-path finder: any import of our kernels package fails, however it is spelled
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.startswith("sglang_mamba_dedup.kernels."):  # the kernel module (its package is light)
                attempts.append(name)
                raise ImportError("simulated broken triton")
            return None

    state.reset()
    from sglang_mamba_dedup import kernels

    monkeypatch.setattr(kernels, "_kernel", None)  # kernels.load()'s memo: as in a fresh process
    monkeypatch.setattr(kernels, "_kernel_error", None)
    monkeypatch.delattr(kernels, "state_commit", raising=False)
    monkeypatch.delitem(sys.modules, "sglang_mamba_dedup.kernels.state_commit", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Broken(), *sys.meta_path])
    try:
        with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
            for _ in range(5):
                assert "simulated broken triton" in commit_patch.kernel_problem()
        assert len(attempts) == 1, "the import must be tried once per process"
        warned = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warned) == 1 and "does not import" in warned[0].getMessage()
        from sglang_mamba_dedup.cli import doctor

        info = doctor.collect()
        assert any("kernel" in p and "simulated broken triton" in p for p in info["problems"]), info["problems"]
    finally:
        state.reset()


# 4. success is visible where logging is not configured yet ------------------------------------------------
def test_activation_line_reaches_stderr_without_logging_configured(monkeypatch, capsys):
    monkeypatch.setenv(env.SWITCH, "1")
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers = []
    root.setLevel(logging.WARNING)
    try:
        activation.register()
    finally:
        root.handlers, _ = saved[0], root.setLevel(saved[1])
    err = capsys.readouterr().err
    assert err.count("sglang-mamba-dedup") == 1 and "applied" in err, err


def test_activation_line_obeys_a_logger_turned_down(monkeypatch, capsys):
    """``sglang-mamba-dedup plan`` turns the plugin's logger down to ERROR while it runs SGLang's estimator with
    the plugin applied: the activation line must not leak to stderr through the not-configured-yet path."""
    monkeypatch.setenv(env.SWITCH, "1")
    root, ours = logging.getLogger(), logging.getLogger("sglang_mamba_dedup")
    saved = root.handlers[:], root.level, ours.level
    root.handlers = []
    root.setLevel(logging.WARNING)
    ours.setLevel(logging.ERROR)
    try:
        activation.register()
    finally:
        root.handlers, _, _ = saved[0], root.setLevel(saved[1]), ours.setLevel(saved[2])
    assert "applied" in activation.last_summary(), activation.last_summary()  # it ran and decided
    assert "sglang-mamba-dedup" not in capsys.readouterr().err


# 6. programmatic apply wins over an unset switch ----------------------------------------------------------
def test_manual_apply_survives_load_plugins_with_the_switch_unset(monkeypatch):
    monkeypatch.delenv(env.SWITCH, raising=False)
    res = sglang_mamba_dedup.apply("commit")
    assert res == {"commit": None}
    from sglang.srt.plugins import load_plugins

    load_plugins()
    activation.register()  # what load_plugins calls (even where the entry point is filtered)
    assert installed.PATCHER.applied("commit"), "a later load_plugins() undid the manual apply"
    assert "apply() was called in this process" in activation.last_summary()
    # an explicit off does revert it
    state.reset()
    sglang_mamba_dedup.apply(["commit"])
    monkeypatch.setenv(env.SWITCH, "0")
    activation.register()
    assert not installed.PATCHER.applied("commit")


def test_apply_rejects_unknown_features_with_a_message():
    with pytest.raises(KeyError, match="unknown feature"):
        sglang_mamba_dedup.apply("comit")


# 12. smaller ones ------------------------------------------------------------------------------------------
def test_long_switch_value_is_truncated(monkeypatch):
    with pytest.raises(activation.SwitchError) as e:
        activation.parse_mode("x" * 10_000)
    assert len(str(e.value)) < 300 and "10000 characters" in str(e.value)


def test_doctor_release_garbage_is_a_usage_error(capsys):
    from sglang_mamba_dedup.cli import doctor

    with pytest.raises(SystemExit) as e:
        doctor.main(["--release", "garbage"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        doctor.main(["--release", ""])
    assert e.value.code == 2


# pool-level cases, on the real SGLang pool (CPU, with SGLang's hard-coded "cuda" redirected) ------------------
import torch  # noqa: E402

from tests.support import eras  # noqa: E402
from tests.support import integration as iu  # noqa: E402


def _cp():
    return iu.make_cache_params(num_layers=2, conv_dim=5, conv_kernel=4, num_heads=2, head_dim=3, state_size=4)


def _pool(**kw):
    return iu.build_pool(cache_params=_cp(), size=3, mamba_size=5, draft_tokens=4, topk=1, **kw)


# 2. strict is strict on every release -----------------------------------------------------------------------
def test_strict_stops_when_the_gate_says_no(monkeypatch):
    monkeypatch.delenv("SGLANG_MAMBA_DEDUP_ALLOW_CPU", raising=False)  # the gate: device 'cpu' is not CUDA
    with iu.cpu_stock_paths(), iu.plugin(True, mode="strict"), pytest.raises(RuntimeError, match="strict.*not CUDA"):
        _pool()


def test_strict_stops_when_the_commit_kernel_is_unavailable(monkeypatch):
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP_ALLOW_CPU", "1")
    monkeypatch.setattr(commit_patch, "kernel_problem", lambda: "ImportError: simulated")
    with iu.cpu_stock_paths(), iu.plugin(True, mode="strict"), pytest.raises(RuntimeError, match="strict.*simulated"):
        _pool()


def test_on_mode_logs_why_our_commit_will_not_serve_the_pool(monkeypatch, caplog):
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP_ALLOW_CPU", "1")
    monkeypatch.setattr(commit_patch, "kernel_problem", lambda: "ImportError: simulated")

    STATE.warned.clear()
    with iu.cpu_stock_paths(), iu.plugin(True), caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        pool = _pool()
    assert state.pool_state(pool.mamba_pool).commit_ok is False or iu.BACKPORT
    assert any(r.levelno == logging.WARNING and "simulated" in r.getMessage() for r in caplog.records)


# 5. revert() never leaves a pool that stock code cannot commit ------------------------------------------------
@pytest.mark.skipif(not iu.BACKPORT, reason="only back-port pools hold a view SGLang's own scatter cannot read")
def test_revert_keeps_the_commit_while_a_backport_pool_lives(monkeypatch):
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP_ALLOW_CPU", "1")
    from sglang_mamba_dedup import report

    with iu.cpu_stock_paths():
        os.environ[env.SWITCH] = "1"
        try:
            installed.apply(SWITCHED_FEATURES)
            pool = _pool()
            assert state.pool_state(pool.mamba_pool).layout == "ours"
            result = sglang_mamba_dedup.revert()
            assert any("kept" in (r or "") for r in result.values()), result
            assert installed.PATCHER.applied("commit")
            backend = iu.build_backend(pool, device="cpu")
            iu.set_forward_metadata(backend, torch.tensor([1, 2, 3], dtype=torch.int32), 4)
            report.clear_events()
            backend.update_mamba_state_after_mtp_verify(torch.tensor([1, -1, 3]), None, None, None)
            assert report.events()["ours_commit_calls"] == 1
            del pool, backend
            gc.collect()
            assert installed.live_backport_pools() == 0
            assert all(r is None for r in sglang_mamba_dedup.revert().values())
            assert not installed.PATCHER.applied("commit")
        finally:
            os.environ.pop(env.SWITCH, None)


# 7. another plugin that calls the class attribute directly -----------------------------------------------------
@pytest.mark.parametrize("style", ["dict_init_keywords", "positional"])
def test_foreign_wrapper_calling_the_class_attribute_still_gets_our_layout(monkeypatch, style):
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP_ALLOW_CPU", "1")
    mp = iu.mem_pool_module()
    with iu.cpu_stock_paths(), iu.plugin(True):
        ours = mp.MambaPool.__dict__["__init__"]

        def foreign_init(self, **kw):  # e.g. a profiler plugin that wraps the constructor its own way
            if style == "dict_init_keywords":
                return ours(self, **kw)
            names = ["size", "spec_state_size", "cache_params", "mamba_layer_ids", "device"]
            if not all(n in kw for n in names):
                return ours(self, **kw)
            return ours(self, *[kw.pop(n) for n in names], **kw)

        monkeypatch.setattr(mp.MambaPool, "__init__", foreign_init)
        pool = _pool()
    assert state.pool_state(pool.mamba_pool).layout == ("ours" if iu.BACKPORT else "upstream")


def test_status_of_another_release_patch_keeps_its_own_reason(monkeypatch):
    """A failing target of one release's patch must not show up as the reason of another release's patch."""
    import dataclasses

    from sglang_mamba_dedup.patcher import Patcher
    from sglang_mamba_dedup.patches import PATCHES

    version = versions.installed_sglang_version()
    estimator = [p for p in PATCHES if p.feature == "estimator"]
    active = next(p for p in estimator if p.applies_to(version))
    broken = [dataclasses.replace(p, module="smd_no_such_module") if p is active else p for p in PATCHES]
    monkeypatch.setattr(installed, "PATCHER", Patcher(broken))
    assert "smd_no_such_module" in installed.apply(["estimator"])["estimator"]
    st = installed.status()
    assert "smd_no_such_module" in st[active.name]["reason"]
    for p in estimator:
        if p is not active:
            assert st[p.name]["state"] == "not-applicable" and "smd_no_such_module" not in st[p.name]["reason"]


# 6. UnifiedMambaPool (--enable-unified-memory, 0.5.15+) never runs MambaPool.__init__ -------------------------
def _unified_pool():
    """SGLang's own UnifiedMambaPool over a minimal stand-in of its unified buffer (the reliability audit's)."""
    import types

    import torch

    um = importlib.import_module("sglang.srt.mem_cache.unified_memory_pool")
    conv = [torch.zeros(2, 7, 8, 3, dtype=torch.bfloat16)]
    temporal = torch.zeros(2, 7, 2, 4, 4)
    spec = types.SimpleNamespace(
        layer_num=2,
        conv_slice_axis=0,
        temporal_state_shape=(2, 4, 4),
        conv_state_shapes=[(8, 3)],
        conv_dtype=torch.bfloat16,
        temporal_dtype=torch.float32,
    )
    buf = types.SimpleNamespace(
        mamba_spec=lambda n: spec,
        mamba_views_for=lambda n: (conv, temporal),
        max_slots=lambda n: 7,
        device="cpu",
        total_bytes=1,
    )
    return um.UnifiedMambaPool(
        unified_buffer=buf, sub_pool_name="m", spec_state_size=2, mamba_layer_ids=[0, 1], speculative_num_draft_tokens=4
    )


@pytest.mark.release
def test_unified_mamba_pool_is_said_recorded_and_refused_in_strict(allow_cpu, caplog):
    if not versions.in_range(iu.SGLANG_VERSION, versions.UNIFIED_POOL):
        pytest.skip(f"SGLang {iu.SGLANG_VERSION} has no UnifiedMambaPool")
    try:
        _unified_pool()  # plugin off: does the stand-in buffer fit this release's constructor?
    except (AttributeError, TypeError, KeyError) as exc:
        pytest.skip(f"the stand-in unified buffer does not fit SGLang {iu.SGLANG_VERSION}: {exc}")
    from sglang_mamba_dedup import report

    with iu.plugin(True):
        pool = _unified_pool()
        ev = report.events()["dedup_layout"]
        assert ev["state"] == "stock" and ev["pool"] == "UnifiedMambaPool" and ev["commit"] == "sglang", ev
        assert state.pool_state(pool).commit_ok is False
        assert installed.status()["unified_mamba_pool.init"]["calls"] == 1
    assert "UnifiedMambaPool (--enable-unified-memory)" in caplog.text
    with iu.plugin(True, mode="strict"), pytest.raises(RuntimeError, match="strict.*UnifiedMambaPool"):
        _unified_pool()


# 3. strict refuses what it cannot vouch for: the negative-control fault, a plugin that cannot load or fails inside
@pytest.mark.parametrize("value", ["commit_step0", " commit_step0 ", "no_such_fault"])
def test_strict_refuses_a_set_fault_variable(monkeypatch, value):
    """A stale ``SGLANG_MAMBA_DEDUP_FAULT`` must not break a strict server's commit: strict stops the launch."""
    from sglang_mamba_dedup.patches import faults

    monkeypatch.setenv(env.SWITCH, "strict")
    monkeypatch.setenv(env.FAULT, value)
    with pytest.raises(SystemExit) as e:
        activation.register()
    msg = str(e.value)
    assert f"{env.FAULT}={value.strip()!r} is set" in msg and "strict mode refuses it" in msg, msg
    assert faults.installed() is None and not is_ours(vars(commit_patch._Route)["commit"])
    assert installed.PATCHER.applied() == [], "strict refused, yet something is wrapped"


def test_on_mode_still_installs_the_fault_for_the_negative_control(monkeypatch, caplog):
    from sglang_mamba_dedup.patches import faults

    monkeypatch.setenv(env.SWITCH, "1")
    monkeypatch.setenv(env.FAULT, faults.COMMIT_STEP0)
    with caplog.at_level(logging.WARNING, logger="sglang_mamba_dedup"):
        activation.register()
    assert faults.installed() == faults.COMMIT_STEP0
    assert "NEGATIVE CONTROL" in caplog.text


@pytest.mark.parametrize("mode", ["strict", "on"])
def test_an_internal_failure_stops_strict_and_leaves_on_out_of_the_way(monkeypatch, caplog, mode):
    """The plugin raising inside ``register`` (here: the patcher): strict stops the launch; on logs one ERROR line.
    Either way nothing of ours stays wrapped and the process's decision is off."""

    def broken(*args, **kwargs):
        raise RuntimeError("simulated internal failure")

    monkeypatch.setattr(installed.PATCHER, "apply", broken)
    monkeypatch.setenv(env.SWITCH, mode)
    with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        if mode == "strict":
            with pytest.raises(SystemExit) as e:
                activation.register()
            assert "the plugin failed inside: RuntimeError: simulated internal failure" in str(e.value)
        else:
            activation.register()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "simulated internal failure" in errors[0], errors
    assert activation.current_mode() is activation.Mode.OFF
    assert installed.PATCHER.applied() == []


_NO_WRAPT = """
import builtins

_real_import = builtins.__import__


def _import(name, *args, **kwargs):
    if name == "wrapt" or name.startswith("wrapt."):
        raise ImportError("simulated: wrapt is not installed")
    return _real_import(name, *args, **kwargs)


builtins.__import__ = _import
"""


@eras.once_per_era  # SGLang's loader is one file on every release (tests/support/eras.py)
@pytest.mark.parametrize("mode", ["strict", "1", "0"])
def test_a_plugin_that_cannot_load_stops_strict_through_sglangs_loader(monkeypatch, tmp_path, mode):
    """``import wrapt`` fails in a fresh process; SGLang's own loader runs the entry point. Strict stops the
    launch (SGLang's loader would only log an import error); on: one ERROR line and the launch goes on; off: quiet."""
    import subprocess

    (tmp_path / "sitecustomize.py").write_text(_NO_WRAPT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv(env.SWITCH, mode)
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    code = "from sglang.srt.plugins import load_plugins; load_plugins(); print('the launch goes on')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    err = proc.stderr
    assert "Failed to load plugin" not in err, err  # the entry point itself loads
    said = [ln for ln in err.splitlines() if "ImportError: simulated: wrapt is not installed" in ln]
    if mode == "strict":
        assert proc.returncode != 0 and "the launch goes on" not in proc.stdout, (proc.returncode, proc.stdout, err)
        assert "strict mode" in err and "the plugin cannot load" in err, err
        return
    assert proc.returncode == 0 and "the launch goes on" in proc.stdout, (proc.returncode, err)
    if mode == "1":
        assert len(said) == 1 and "cannot load and stays out of the way" in said[0], err
    else:
        assert said == [], err
