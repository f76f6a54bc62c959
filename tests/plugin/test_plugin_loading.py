"""SGLang's own plugin loader, in fresh *spawned* processes (as SGLang starts its schedulers).

The loader is the same file on every release (``eras.LOADER_MD5``, checked here on each): the spawned-process
tests (~10 s each, an SGLang import per child) run on the newest release of each era of the patch table.
"""

import importlib.metadata
import multiprocessing
import os

import pytest

from tests.support import eras

pytestmark = pytest.mark.release


def _child_load_plugins():
    """Runs in a spawned child: what SGLang's scheduler does first, then report what is wrapped."""
    from sglang.srt.plugins import load_plugins

    from sglang_mamba_dedup import activation, installed
    from sglang_mamba_dedup.patcher import is_ours, resolve
    from sglang_mamba_dedup.patches import PATCHES

    load_plugins()
    wrapped = {}
    for p in PATCHES:
        try:
            parent, attr, raw = resolve(p.module, p.attr)
        except Exception:
            continue
        wrapped[p.name] = is_ours(raw, p.name)
    return {
        "env": os.environ.get("SGLANG_MAMBA_DEDUP"),
        "wrapped": wrapped,
        "status": installed.status(),
        "summary": activation.last_summary(),
    }


def _spawn(fn):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(fn)


def test_sglang_plugin_loader_is_the_one_the_era_tests_assume():
    """The spawned-process tests below (and the failure modes' loader test) run once per era because SGLang's
    loader is this same file on every release; a release that changes it fails here until it is added to them."""
    assert eras.loader_md5() == eras.LOADER_MD5, (
        f"SGLang {eras.installed()} has another plugin loader: run the loader tests on it (tests/support/eras.py)"
    )


def test_entry_point_is_discoverable():
    eps = importlib.metadata.entry_points(group="sglang.srt.plugins")
    ours = [ep for ep in eps if ep.name == "mamba_dedup"]
    assert len(ours) == 1 and ours[0].value == "sglang_mamba_dedup.activation:register"
    from sglang_mamba_dedup.activation import register

    assert ours[0].load() is register


@eras.once_per_era
def test_spawned_child_with_switch_on_is_patched_by_sglangs_loader(monkeypatch):
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP", "1")
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    out = _spawn(_child_load_plugins)
    assert out["env"] == "1"
    applied = {n for n, s in out["status"].items() if s["state"] == "applied"}
    assert {"mamba_pool.init", "hybrid_linear_attn.update_mamba_state_after_mtp_verify"} <= applied
    assert all(out["wrapped"][n] for n in applied), "status says applied but the target is not our wrapper"
    assert "applied" in out["summary"]


@eras.once_per_era
def test_spawned_child_with_switch_off_wraps_nothing(monkeypatch):
    monkeypatch.delenv("SGLANG_MAMBA_DEDUP", raising=False)
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    out = _spawn(_child_load_plugins)
    assert not any(out["wrapped"].values())
    assert "off" in out["summary"], "the plugin did not run at all: the test would not prove anything"


@eras.once_per_era
def test_sglang_plugins_allow_list_excludes_us(monkeypatch):
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP", "1")
    monkeypatch.setenv("SGLANG_PLUGINS", "some_other_plugin")
    out = _spawn(_child_load_plugins)
    assert not any(out["wrapped"].values())
    assert out["summary"] is None, "register() ran although SGLANG_PLUGINS did not name us"


@eras.once_per_era
def test_launch_flag_reaches_spawned_children(monkeypatch):
    """The launcher sees --enable-mamba-conv-dedup; a scheduler spawned afterwards is patched."""
    from sglang_mamba_dedup import activation

    monkeypatch.delenv("SGLANG_MAMBA_DEDUP", raising=False)
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.setattr("sys.argv", ["sglang.launch_server", "--model-path", "m", "--enable-mamba-conv-dedup"])
    activation.register()  # the launcher's load_plugins()
    out = _spawn(_child_load_plugins)
    assert out["env"] == "1"
    assert (
        out["wrapped"]["mamba_pool.init"] and out["wrapped"]["hybrid_linear_attn.update_mamba_state_after_mtp_verify"]
    )
