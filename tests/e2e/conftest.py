"""Fixtures of the e2e tests: a kept workdir and checkpoint folder, and a checkpoint build that fails the test."""

import pytest


@pytest.fixture
def workdir(tmp_path):
    return ["--workdir", str(tmp_path / "w"), "--random-weights-dir", str(tmp_path / "model")]


@pytest.fixture
def no_build(monkeypatch):
    """Building a checkpoint is a failure of the test: usage errors and a missing GPU must stop first."""
    from sglang_mamba_dedup.e2e import random_model

    def build(*a, **k):
        raise AssertionError("a random-weight checkpoint was built")

    monkeypatch.setattr(random_model, "build_random_model", build)
