"""Fixtures of the zero-copy tests."""

from __future__ import annotations

import contextlib

import pytest
import torch

from sglang_mamba_dedup import installed
from sglang_mamba_dedup.patches import faults


@pytest.fixture
def zero_copy_patched(monkeypatch):
    if not hasattr(torch.cpu, "device"):  # SGLang's selective_state_update enters a device context (CUDA-only API)
        monkeypatch.setattr(torch.cpu, "device", lambda index: contextlib.nullcontext(), raising=False)
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP", "1")
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP_ZERO_COPY", "1")
    assert installed.apply(["commit", "zero_copy"]) == {"commit": None, "zero_copy": None}
    yield
    faults.remove()
    installed.revert(force=True)
