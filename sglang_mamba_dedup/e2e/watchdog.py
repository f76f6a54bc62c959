"""No process of the e2e outlives it, whatever ends it and whenever (BD2 of the 2026-12-04 turn-2 audit).

A process the e2e starts itself gets the parent-death signal before it runs (:func:`.interrupts.die_with_parent`),
so it ends with the driver. Its own children are another matter: SGLang's scheduler asks for that signal only once
its imports are done, seconds into its life, and a driver killed (SIGKILL, ``timeout -k``) before then takes the
server down but leaves the scheduler running, orphaned, holding its GPU memory.

So every such process carries a mark in its environment (:data:`MARK`, one value per driver), which its children
inherit, and a watchdog process (started with the first of them, in its own session: a signal to the driver's
process group does not reach it) waits for the driver to end. When the driver's end of a pipe closes (a normal
exit, an exception, SIGKILL: the kernel closes it in every case), the watchdog SIGKILLs every process of this user
that carries the mark, scanning ``/proc`` until two scans in a row find none (a server killed meanwhile may have
forked once more). After a clean run nothing carries it any more, and the watchdog just ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid

#: The environment variable that marks a process as the e2e's (its value: one driver's token).
MARK = "SGLANG_MAMBA_DEDUP_E2E_RUN"

_lock = threading.Lock()
_watch: tuple[subprocess.Popen, str, int] | None = None  # (watchdog, token, the driver's pid)

#: The watchdog's program: ``python -c WATCHDOG MARK TOKEN``, its stdin the read end of the driver's pipe. No imports
#: beyond the standard library's, and it never touches a process without the mark.
WATCHDOG = r"""
import os, signal, sys, time
mark = (sys.argv[1] + "=" + sys.argv[2]).encode() + b"\0"
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)  # only the pipe's end ends it
sys.stdin.buffer.read()  # until the driver's end closes, however the driver ended
me = os.getpid()

def marked():
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            try:
                with open(f"/proc/{name}/environ", "rb") as fh:
                    if mark in b"\0" + fh.read():
                        found.append(int(name))
            except OSError:
                pass  # gone, or not ours
    return found

quiet, deadline = 0, time.monotonic() + 30
while quiet < 2 and time.monotonic() < deadline:
    pids = marked()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    quiet = 0 if pids else quiet + 1
    time.sleep(0.05)
"""


def marked_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this driver's mark, the watchdog started if it is not running yet (Linux; elsewhere ``env``
    unchanged). Call it just before starting a process of the e2e, with the environment it gets."""
    token = _ensure()
    if token is not None:
        env[MARK] = token
    return env


def _ensure() -> str | None:
    global _watch
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc/self"):
        return None
    with _lock:
        if _watch is not None and _watch[2] == os.getpid() and _watch[0].poll() is None:
            return _watch[1]
        token = uuid.uuid4().hex
        env = {k: v for k, v in os.environ.items() if k != MARK}
        dog = subprocess.Popen(
            [sys.executable, "-S", "-c", WATCHDOG, MARK, token],  # -S: the standard library only
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd="/",
            start_new_session=True,  # neither Ctrl-C nor a signal to the driver's group reaches it
        )
        _watch = (dog, token, os.getpid())
        return token
