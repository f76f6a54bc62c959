"""Shared test setup.

* ``TRITON_INTERPRET=1`` is set before anything imports triton when no GPU is present, so our Triton
  kernels (and SGLang's) run on CPU tensors, which is how CI tests them.
* Marker ``release``: exercises SGLang itself; CI runs these tests against every release in
  ``versions.RELEASES`` (the whole suite against the newest).
* Every test starts with the plugin switched off and nothing wrapped, and ends the same way.
"""

import os

import torch  # imports no triton; asks the driver whether a CUDA device is usable

# The one place TRITON_INTERPRET is set: Triton reads it when it is imported, so it must precede every test
# module's imports; the session fixture below restores the environment at the end.
# Not `which nvidia-smi`: a GPU container need not ship it, and the interpreter on CUDA tensors then runs
# every kernel on the host (slow, and SGLang's own kernels can crash there).
_INTERPRET_SET_HERE = not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ
if _INTERPRET_SET_HERE:
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _triton_interpret_scope():
    yield
    if _INTERPRET_SET_HERE:
        os.environ.pop("TRITON_INTERPRET", None)


@pytest.fixture
def allow_cpu(monkeypatch):
    """Tests only: the gate accepts a CPU pool (the interpreter stands in for the GPU); undone after the test."""
    from sglang_mamba_dedup import env

    monkeypatch.setenv(env.ALLOW_CPU, "1")


def pytest_configure(config):
    config.addinivalue_line("markers", "release: exercises the installed SGLang; CI runs it on every release venv")


@pytest.fixture(autouse=True)
def _plugin_clean(monkeypatch):
    from sglang_mamba_dedup import env, installed, state
    from sglang_mamba_dedup.patches import faults

    for name in (env.SWITCH, env.FAULT, env.REPORT_DIR, env.ZERO_COPY):
        monkeypatch.delenv(name, raising=False)
    installed.revert(force=True)
    state.reset()
    yield
    faults.remove()
    installed.revert(force=True)
    state.reset()
