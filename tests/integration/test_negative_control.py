"""The negative control of the end-to-end md5 proof reaches the commit the plugin really makes.

The same speculative-decode simulation (real SGLang pool, verify writer and
``HybridLinearAttnBackend.update_mamba_state_after_mtp_verify``) three ways: stock, plugin, and plugin with
the fault ``SGLANG_MAMBA_DEDUP_FAULT=commit_step0`` installed the way a scheduler process installs it (the
activation, from the environment). Stock and plugin must be bit-identical; the fault run must differ in
states and outputs, with every commit through our kernel and every accepted slot holding draft step 0.
If the fault stops reaching the launch the wrapper makes (as it once did, when it replaced a public
function the wrapper no longer called), the fault run equals stock and this test fails.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from sglang_mamba_dedup import activation, env, installed, kernels, report, state
from sglang_mamba_dedup.patcher import is_ours
from sglang_mamba_dedup.patches import commit as commit_patch
from sglang_mamba_dedup.patches import faults
from tests.support import integration as iu

pytestmark = [pytest.mark.release, pytest.mark.usefixtures("allow_cpu")]


@pytest.fixture(scope="module")
def kernel_impl():
    return iu.ensure_commit_kernel()


@contextlib.contextmanager
def _fault_run(monkeypatch):
    """The plugin switched on with the fault in the environment, through the entry point SGLang calls."""
    monkeypatch.setenv(env.SWITCH, "1")
    monkeypatch.setenv(env.FAULT, faults.COMMIT_STEP0)
    report.clear_events()
    activation.register()
    try:
        yield
    finally:
        faults.remove()
        installed.revert(force=True)
        state.reset()


def test_negative_control_fault_reaches_the_kernel(kernel_impl, monkeypatch):
    cfg = iu.SimConfig(steps=8, batch=3, draft_tokens=4)
    with iu.cpu_stock_paths(cfg.device), iu.plugin(False):
        stock = iu.simulate(cfg)
    with iu.cpu_stock_paths(cfg.device), iu.plugin(True):
        ours = iu.simulate(cfg)

    kernel = kernels.load()
    real_launch = kernel.launch
    launched_steps = []

    def counting_launch(plan, **kwargs):
        launched_steps.append(kwargs["accept"][0].tolist())
        return real_launch(plan, **kwargs)

    monkeypatch.setattr(kernel, "launch", counting_launch)
    with iu.cpu_stock_paths(cfg.device), _fault_run(monkeypatch):
        assert faults.installed() == faults.COMMIT_STEP0
        faulty = iu.simulate(cfg)
    assert faults.installed() is None and not is_ours(vars(commit_patch._Route)["commit"])

    # stock == plugin, bit for bit
    for a, b in zip(stock.final, ours.final):
        assert torch.equal(a, b)
    for a, b in zip(stock.outputs, ours.outputs):
        assert torch.equal(a, b)
    assert ours.events["ours_commit_calls"] == cfg.steps

    # the fault ran inside our kernel on every commit ...
    assert faulty.events["fault"] == faults.COMMIT_STEP0
    assert faulty.events["commit_calls"] == faulty.events["ours_commit_calls"] == cfg.steps
    assert len(launched_steps) == cfg.steps
    assert all(s in (0, -1) for steps in launched_steps for s in steps)
    # ... its effect read back from the pool: every accepted row holds draft step 0
    for lens, got in zip(faulty.accept_lens, faulty.slot_steps):
        assert got == [0 if n > 0 else -1 for n in lens]
    # ... and states and outputs differ from stock
    assert any(not torch.equal(a, b) for a, b in zip(stock.final[:-1], faulty.final[:-1])), "conv states equal"
    assert not torch.equal(stock.final[-1], faulty.final[-1]), "SSM states equal"
    assert any(not torch.equal(a, b) for a, b in zip(stock.outputs, faulty.outputs)), "outputs equal"


def test_negative_control_unknown_fault_installs_nothing(monkeypatch, caplog):
    monkeypatch.setenv(env.FAULT, "commit_everything_wrong")
    assert faults.install_from_env() is None
    assert faults.installed() is None and not is_ours(vars(commit_patch._Route)["commit"])
    assert "commit_everything_wrong" in caplog.text and "no fault installed" in caplog.text


def test_negative_control_not_installed_when_the_plugin_is_off(monkeypatch):
    monkeypatch.setenv(env.FAULT, faults.COMMIT_STEP0)
    monkeypatch.setenv(env.SWITCH, "0")
    activation.register()
    assert faults.installed() is None and "fault" not in report.events()
