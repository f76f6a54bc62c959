"""Processes of the e2e tests: is a pid alive, the pids a fake server wrote, and the end of what a test left."""

import os
import signal
import subprocess
import sys
from pathlib import Path


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (one that ended and waits to be reaped holds nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # no /proc here, or it just went
        return True


def read_pids(*paths: Path) -> list[int]:
    """The pids written into these files, one a line (a missing file holds none)."""
    return [int(x) for p in paths if p.exists() for x in p.read_text().split()]


def kill_left(pids: list[int]) -> list[int]:
    """SIGKILL each pid still alive (each one a test started); returns those that were."""
    left = [p for p in pids if alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def start_fake_server(port: int, *options: str, **env: str) -> subprocess.Popen:
    """tests/e2e/fake_launch_server.py on ``port`` in its own session (end it with ``os.killpg``), quiet."""
    fake = str(Path(__file__).resolve().parent / "fake_launch_server.py")
    return subprocess.Popen(
        [sys.executable, fake, "--port", str(port), *options],
        env={**os.environ, **env},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
