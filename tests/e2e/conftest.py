"""Fixtures of the e2e tests: a kept workdir and checkpoint folder, a checkpoint build that fails the test, and
launch_server replaced by the fake (tests/e2e/fake_launch_server.py)."""

import sys
import urllib.request
from pathlib import Path

import pytest

from sglang_mamba_dedup.e2e import engine, server

FAKE_SERVER = str(Path(__file__).resolve().parent / "fake_launch_server.py")


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


@pytest.fixture
def fake_servers(monkeypatch, tmp_path):
    """launch_server replaced by the fake; records each start and whether the off server was healthy when the
    on server's command was built (they must start one after the other)."""
    original = server.server_command
    starts = []

    def command(engine_kwargs, port, flag):
        cmd = original(engine_kwargs, port, flag)
        healthy_off = None
        if flag and starts:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{starts[0][1]}/health", timeout=5).read()
                healthy_off = True
            except OSError:
                healthy_off = False
        starts.append(("on" if flag else "off", port, healthy_off))
        return [sys.executable, FAKE_SERVER] + cmd[3:]

    monkeypatch.setattr(server, "server_command", command)
    monkeypatch.setattr(engine, "cuda_problem", lambda kw: None)
    monkeypatch.setenv("FAKE_SERVER_CHILD_PID_FILE", str(tmp_path / "children.pid"))
    monkeypatch.setenv("FAKE_SERVER_LOG", str(tmp_path / "requests.log"))
    return starts
