"""Shared test setup.

* ``TRITON_INTERPRET=1`` is set before anything imports triton when no GPU is present, so our Triton
  kernels (and SGLang's) run on CPU tensors, which is how CI tests them.
* Markers: ``release`` = exercises SGLang itself and runs in every SGLang venv CI builds (0.5.23 and
  0.5.13.post1); ``gpu`` = needs CUDA.
* Every test starts with the plugin switched off and nothing wrapped, and ends the same way.
"""

import os

import torch  # imports no triton; asks the driver whether a CUDA device is usable

# Not `which nvidia-smi`: a GPU container need not ship it, and the interpreter on CUDA tensors then runs
# every kernel on the host (slow, and SGLang's own kernels can crash there).
if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "release: exercises the installed SGLang; CI runs it on every release venv")
    config.addinivalue_line("markers", "gpu: needs a CUDA device")


@pytest.fixture(autouse=True)
def _plugin_clean(monkeypatch):
    from sglang_mamba_dedup import activation, patch_state, report

    monkeypatch.delenv(activation.ENV, raising=False)
    monkeypatch.delenv(report.REPORT_DIR_ENV, raising=False)
    patch_state.revert(force=True)
    activation.reset_for_tests()
    report.reset()
    yield
    patch_state.revert(force=True)
    for feature in patch_state.PATCHER.features:
        patch_state.PATCHER.set_enabled(feature, True)
    activation.reset_for_tests()
    report.reset()


def sglang_version():
    from sglang_mamba_dedup import versions

    return versions.installed_sglang_version()
