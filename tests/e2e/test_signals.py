"""No server left behind (audit B2, B3): a real e2e process over fake launch_servers (tests/e2e/fake_e2e.py)
gets SIGTERM, SIGHUP, SIGINT or two SIGINTs while its servers run; afterwards no process of theirs is alive."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglang_mamba_dedup.e2e import verdict
from tests.e2e.procs import alive, kill_left, read_pids

ROOT = Path(__file__).resolve().parents[2]
FAKE_E2E = str(Path(__file__).resolve().parent / "fake_e2e.py")
#: Printed once both servers are up and warmed up: the pairs are running.
PAIRS_RUN = "pairs (prefix cache emptied before each request)"
#: The ceiling of every wait for an event here (a line printed, a process gone): generous, since CI's two cores
#: run another test job beside this one; a test waits for the event, not for this time. One stop may take the
#: SIGTERM grace time of server.stop_all (30 s) plus its SIGKILL wait.
CEILING = 120.0


def _start(tmp_path: Path, *extra: str, **env: str) -> subprocess.Popen:
    """The e2e over two fake servers, each /generate taking 0.2 s, pairs enough for a minute; its own session."""
    argv = [sys.executable, FAKE_E2E, "--server", "--prompt-format", "ids", "--vocab-size", "100"]
    argv += ["--num-prompts", "2", "--max-new-tokens", "3", "--model-path", str(tmp_path)]
    argv += ["--workdir", str(tmp_path / "w"), "--run-timeout", "20", *extra]
    full_env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "FAKE_SERVER_DELAY": "0.2",
        "FAKE_SERVER_PID_FILE": str(tmp_path / "servers.pid"),
        "FAKE_SERVER_CHILD_PID_FILE": str(tmp_path / "children.pid"),
        **env,
    }
    with open(tmp_path / "out.txt", "w") as out:
        return subprocess.Popen(argv, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for(tmp_path: Path, text: str, proc: subprocess.Popen, timeout: float = CEILING) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in (tmp_path / "out.txt").read_text():
            return
        assert proc.poll() is None, (tmp_path / "out.txt").read_text()
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not printed within {timeout} s")


def _processes(tmp_path: Path) -> list[int]:
    return read_pids(tmp_path / "servers.pid", tmp_path / "children.pid")


def _until(done, timeout: float = CEILING) -> bool:
    """Polls ``done()`` until it holds (True) or ``timeout`` seconds are over (False)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _ended(tmp_path: Path, proc: subprocess.Popen, timeout: float = CEILING) -> tuple[int, str]:
    """The e2e's exit status and output once it ended; every fake server and child it started must be gone."""
    rc = None
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:
            proc.kill()
        left = kill_left(_processes(tmp_path))
    out = (tmp_path / "out.txt").read_text()
    assert rc is not None, f"the e2e still ran {timeout:g} s later\n{out}"
    assert not left, f"left running: {left}\n{out}"
    return rc, out


THROUGHPUT = ("--throughput", "--batch1-tokens", "3", "--batch1-pairs", "300", "--full-pairs", "50")


@pytest.mark.parametrize(
    "sig, rc",
    [
        (signal.SIGTERM, 128 + signal.SIGTERM),
        (signal.SIGHUP, 128 + signal.SIGHUP),
        (signal.SIGINT, 128 + signal.SIGINT),
    ],
    ids=["term", "hup", "int"],
)
def test_a_signal_stops_both_servers(sig, rc, tmp_path):
    """Each signal, Ctrl-C too (audit m-E5), ends in one "stopped by" line and 128 + the signal, no traceback."""
    proc = _start(tmp_path, *THROUGHPUT)
    _wait_for(tmp_path, PAIRS_RUN, proc)
    assert len(_processes(tmp_path)) == 4 and all(map(alive, _processes(tmp_path)))
    proc.send_signal(sig)
    code, out = _ended(tmp_path, proc)
    assert code == rc, out
    assert f"stopped by {signal.Signals(sig).name}" in out, out
    assert "Traceback" not in out, out


def test_sigterm_during_a_run_of_the_server_route(tmp_path):
    """--server without --throughput: one server at a time, stopped as well."""
    proc = _start(tmp_path, FAKE_SERVER_DELAY="1")
    _wait_for(tmp_path, "-- run 1/2", proc)
    _until(lambda: len(_processes(tmp_path)) >= 2)
    assert len(_processes(tmp_path)) == 2 and all(map(alive, _processes(tmp_path)))
    proc.send_signal(signal.SIGTERM)
    code, out = _ended(tmp_path, proc)
    assert code == 128 + signal.SIGTERM, out


def test_second_ctrl_c_during_the_stop_kills_a_server_that_ignores_sigterm(tmp_path):
    """Both servers outlive SIGTERM (each notes it in a file): both get it at once (server.stop_all), the stop
    waits for them, and the second Ctrl-C kills both without waiting out the grace."""
    term = tmp_path / "term.pid"
    proc = _start(tmp_path, *THROUGHPUT, FAKE_SERVER_IGNORE_TERM="1", FAKE_SERVER_TERM_FILE=str(term))
    _wait_for(tmp_path, PAIRS_RUN, proc)
    servers = read_pids(tmp_path / "servers.pid")
    assert len(servers) == 2
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    # the stop has begun, for both servers at once: each got SIGTERM
    assert _until(lambda: sorted(read_pids(term)) == sorted(servers), timeout=25), "both servers get SIGTERM at once"
    assert proc.poll() is None and time.monotonic() - t0 < 25, "the stop waits for the servers (SIGTERM outlived)"
    t1 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code, out = _ended(tmp_path, proc)
    assert code == 128 + signal.SIGINT and "Traceback" not in out, out
    assert time.monotonic() - t1 < 25, "the second Ctrl-C must not wait out SIGTERM's grace time (30 s)"
    assert "SIGKILL now" in out


def test_a_failed_request_stops_both_servers(tmp_path):
    proc = _start(tmp_path, *THROUGHPUT, FAKE_SERVER_ANSWER="fail_on", FAKE_SERVER_DELAY="0")
    code, out = _ended(tmp_path, proc)
    assert code == verdict.EXIT_RUN_FAILED and "request failed: HTTPError" in out, out
    assert len(_processes(tmp_path)) == 4
    # the failure is the "on" server's alone (audit m-E6): the "off" run is stopped with it, not failed
    assert "run 2 (on) failed (request failed: HTTPError" in out and "run 1 (off) stopped with it" in out, out
    assert "all 2 runs failed" not in out, out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_sigkilled_driver_leaves_no_server(tmp_path):
    """m-E1 of the second audit: SIGKILL (or ``timeout -k``) runs no cleanup; the servers (own sessions) went on
    holding their GPU memory. Now the kernel ends them with the driver, and their children with them."""
    proc = _start(tmp_path, *THROUGHPUT)
    _wait_for(tmp_path, PAIRS_RUN, proc)
    pids = _processes(tmp_path)
    assert len(pids) == 4 and all(map(alive, pids))
    proc.kill()
    proc.wait(timeout=CEILING)
    _until(lambda: not any(map(alive, pids)))
    left = [p for p in pids if alive(p)]
    kill_left(left)
    assert not left, f"left running after the driver was killed: {left}"


STUBBORN = """
import signal, sys, time
from pathlib import Path
signal.signal(signal.SIGTERM, lambda *a: Path(sys.argv[1] + ".term").touch())  # outlives SIGTERM
Path(sys.argv[1] + ".ready").touch()
time.sleep(600)
"""


def test_servers_that_outlive_sigterm_cost_one_grace_time_together(tmp_path, capfd):
    """m18 of the 2026-12-04 reliability audit: the two servers of --throughput were stopped one after the other,
    each with its own SIGTERM grace. server.stop_all sends SIGTERM to every group first: both got it before the
    first grace ran out, and the whole stop takes one grace time, not two. Each group still running when the grace
    runs out is named on stderr."""
    from sglang_mamba_dedup.e2e import server

    grace = 3.0
    marks = [str(tmp_path / name) for name in ("a", "b")]
    procs = [subprocess.Popen([sys.executable, "-c", STUBBORN, m], start_new_session=True) for m in marks]
    try:
        assert _until(lambda: all(Path(m + ".ready").exists() for m in marks)), "the stand-ins did not start"
        t0 = time.monotonic()
        server.stop_all(procs, grace=grace)
        took = time.monotonic() - t0
    finally:
        kill_left([p.pid for p in procs])
    assert all(Path(m + ".term").exists() for m in marks), "each group got SIGTERM"
    assert all(p.returncode == -signal.SIGKILL for p in procs)
    assert grace <= took < 2 * grace, f"{took:.1f} s: the groups were stopped one after the other"
    err = capfd.readouterr().err
    assert all(f"(pid {p.pid}) still runs 3 s after SIGTERM" in err for p in procs), err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_driver_sigkilled_during_start_up_leaves_no_server_child(tmp_path):
    """BD2 of the 2026-12-04 turn-2 audit: a scheduler asks for its parent-death signal only once its imports are
    done (seconds with SGLang); a driver SIGKILLed before then took the server down (its own parent-death signal)
    but left the child running, orphaned. Here the fake server's child waits 3 s before it asks: whatever the
    signal's timing, no process the e2e started outlives it."""
    proc = _start(tmp_path, *THROUGHPUT, FAKE_SERVER_CHILD_SLOW="3")
    assert _until(lambda: read_pids(tmp_path / "children.pid")), (tmp_path / "out.txt").read_text()
    proc.kill()
    proc.wait(timeout=CEILING)
    pids = _processes(tmp_path)
    assert pids
    _until(lambda: not any(map(alive, pids)), timeout=10)
    left = kill_left(pids)
    assert not left, f"left running after the driver was killed in start-up: {left}"


def test_a_server_killed_during_the_run_is_named_as_the_cause(tmp_path):
    """m14 of the 2026-12-04 turn-2 audit: the "on" server SIGKILLed while the pairs run; the cause was "request
    failed: URLError ... Connection refused". Now the server's own end is the cause."""
    proc = _start(tmp_path, *THROUGHPUT)
    _wait_for(tmp_path, PAIRS_RUN, proc)
    off, on = read_pids(tmp_path / "servers.pid")
    os.kill(on, signal.SIGKILL)
    code, out = _ended(tmp_path, proc)
    assert code == verdict.EXIT_RUN_FAILED, out
    assert f"the server (pid {on}) killed by SIGKILL during the run" in out, out


def test_a_stop_says_what_it_waits_for_and_grace_zero_kills_at_once(tmp_path, capfd):
    """m15: servers that outlive SIGTERM: after server.NOTE_AFTER_S of the grace a line says what the stop waits
    for (the audit saw nothing for 10 s, then only the SIGKILL lines). m16: ``grace=0`` asks for SIGKILL at once:
    no "still runs 0 s after SIGTERM" line for a process that had ended on SIGTERM."""
    from sglang_mamba_dedup.e2e import server

    mark = str(tmp_path / "a")
    stubborn = subprocess.Popen([sys.executable, "-c", STUBBORN, mark], start_new_session=True)
    plain = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        assert _until(lambda: Path(mark + ".ready").exists()), "the stand-in did not start"
        server.stop_all([stubborn], grace=server.NOTE_AFTER_S + 1)
        waited = capfd.readouterr().err
        server.stop_all([plain], grace=0)
        at_once = capfd.readouterr().err
    finally:
        kill_left([stubborn.pid, plain.pid])
    assert f"waiting up to 1 s more for the server(s) (pid {stubborn.pid})" in waited, waited
    assert f"(pid {stubborn.pid}) still runs" in waited, waited
    assert plain.returncode in (-signal.SIGTERM, -signal.SIGKILL) and "still runs" not in at_once, at_once
