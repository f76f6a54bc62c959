"""Process-local events (each pool's layout, bytes and ledger; how many commits our kernel served) and the commit
kernel's launches by path, and the optional status report: with ``SGLANG_MAMBA_DEDUP_REPORT_DIR`` set, each process
writes ``status-<pid>-<token>.json`` there whenever that changes (pool built; 1st, 2nd, 4th ... commit), so a driver
can read what the *scheduler* saw. Counting is a Python integer increment under :attr:`~.state.ProcessState.lock`,
taken once per verify commit (:func:`count_commit`): no device work, no host sync.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import sys
from collections.abc import Iterator
from typing import Any

from . import env, state, versions
from .state import COUNTERS as COUNTERS  # the counters' names, for readers of the report
from .state import LAUNCH_PATHS, STATE, ZERO_COPY_COUNTERS, current_mode


def events() -> dict[str, Any]:
    with STATE.lock:
        return json.loads(json.dumps(STATE.events))


def record_layout(state: str, reason: str | None, dense_bytes: int, physical_bytes: int, **extra: Any) -> None:
    """Record the conv-window layout of the pool just built: state is 'ours', 'upstream' or 'stock'."""
    with STATE.lock:
        STATE.events["dedup_layout"] = {
            "state": state,
            "reason": reason,
            "dense_bytes": int(dense_bytes),
            "physical_bytes": int(physical_bytes),
            **extra,
        }
    write()


def record_ledger(doc: dict[str, Any]) -> None:
    """Record the ledger of the pool just built: ``ledgers`` keeps every pool's in build order, ``ledger`` the last."""
    with STATE.lock:
        STATE.events["ledger"] = doc
        STATE.events.setdefault("ledgers", []).append(doc)
    write()


def record_fault(name: str | None) -> None:
    """Record the negative-control fault in place in this process (:mod:`.patches.faults`), or its removal."""
    with STATE.lock:
        if name is None:
            STATE.events.pop("fault", None)
        else:
            STATE.events["fault"] = name
    if name is not None:
        write()


def record_zero_copy(decision: str) -> None:
    """Log a pool's zero-copy decision in the report's events: ``on``, or ``off: <reason>``. A log line of the last
    pool decided, never a source of truth: each pool's decision and reason are its
    :class:`~.state.PoolState`'s, which ``/get_server_info`` reads."""
    with STATE.lock:
        STATE.events["zero_copy"] = decision


def count_commit(ours: bool, track: bool = False, zero_copy: bool = False, path: str | None = None) -> None:
    """Count one verify commit, all under one lock (one per decode step): ``ours`` when our kernel served it,
    ``track`` when it had a track set, ``zero_copy`` when the zero-copy commit served it (``zc_commit_calls``; with a
    track set also ``zc_track_commits``) and
    ``path`` the launch path its kernel took (:data:`~.state.LAUNCH_PATHS`; None: nothing launched or SGLang's)."""
    _check_path(path)
    with STATE.lock:
        STATE.events["commit_calls"] += 1
        if zero_copy:
            STATE.events["zc_commit_calls"] = STATE.events.get("zc_commit_calls", 0) + 1
            if track:
                STATE.events["zc_track_commits"] = STATE.events.get("zc_track_commits", 0) + 1
        if ours:
            STATE.events["ours_commit_calls"] += 1
        if track:
            STATE.events["track_commit_calls"] += 1
            if ours:
                STATE.events["ours_track_commit_calls"] += 1
        if path is not None:
            STATE.launches[path] += 1
        n = STATE.events["commit_calls"]
    if n & (n - 1) == 0:  # 1, 2, 4, 8, ...: a handful of writes over a whole run
        write()


def count(name: str, n: int = 1) -> None:
    """Count ``n`` zero-copy events (:data:`~.state.ZERO_COPY_COUNTERS`: a commit served, an extend staged in, a
    session state materialized, tree evictions). An undeclared name is a bug of ours: ValueError."""
    if name not in ZERO_COPY_COUNTERS:
        raise ValueError(f"{name!r} is not a declared counter ({', '.join(ZERO_COPY_COUNTERS)})")
    with STATE.lock:
        STATE.events[name] = STATE.events.get(name, 0) + n


def count_launch(path: str | None) -> None:
    """Count one commit-kernel launch outside a verify commit (zero-copy's stage-in, once per extend) by its path."""
    _check_path(path)
    if path is not None:
        with STATE.lock:
            STATE.launches[path] += 1


def _check_path(path: str | None) -> None:
    if path is not None and path not in LAUNCH_PATHS:
        raise ValueError(f"{path!r} is not a launch path ({', '.join(LAUNCH_PATHS)})")


def launches() -> dict[str, int]:
    """The commit kernel's launches so far by path (the report's ``launches``: whether the direct launch served)."""
    with STATE.lock:
        return dict(STATE.launches)


def snapshot() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "argv0": sys.argv[0] if sys.argv else "",
        "sglang_version": versions.installed_sglang_version(),
        "mode": current_mode().value,
        "patches": {name: {k: v for k, v in st.items() if k != "target"} for name, st in STATE.patch_status().items()},
        "events": events(),
        "launches": launches(),
    }


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """No report file is written inside the block (the what-if CLIs); events are still recorded in memory."""
    STATE.report_muted += 1
    try:
        yield
    finally:
        STATE.report_muted -= 1


def report_path(directory: str) -> str:
    """This process's report file in ``directory``: ``status-<pid>-<token>.json``."""
    pid = os.getpid()
    if STATE.report_token[0] != pid:  # a forked child gets a token of its own
        STATE.report_token = (pid, secrets.token_hex(4))
    return os.path.join(directory, f"status-{pid}-{STATE.report_token[1]}.json")


def write() -> str | None:
    """Write this process's report if the report directory is configured; never raises. The first write also
    registers one at interpreter exit (a process killed by a signal keeps its last power-of-two report)."""
    directory = env.value(env.REPORT_DIR)  # stripped: a blank value is no directory, never a folder named " "
    if not directory or STATE.report_muted:
        return None
    directory = os.path.expanduser(directory)  # "~/reports" where no shell expanded it: never a folder named "~"
    if not STATE.report_atexit:
        STATE.report_atexit = True
        atexit.register(write)
    tmp = None
    try:
        text = json.dumps(snapshot(), indent=1, sort_keys=True)
        os.makedirs(directory, exist_ok=True)
        path = report_path(directory)
        tmp, fd = _create_temp(path)
        try:
            f = os.fdopen(fd, "w")
        except BaseException:
            os.close(fd)
            raise
        with f:
            f.write(text)
        os.replace(tmp, path)  # renames over a link at ``path`` itself, never through it
        return path
    except Exception:  # a report must never break serving
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return None


# A fresh file, never an existing one: O_EXCL fails on any existing name, a (dangling) symlink included.
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _create_temp(path: str) -> tuple[str, int]:
    """Create ``<path>.<random>.tmp`` exclusively: (name, open fd). Unlike ``tempfile.mkstemp`` the mode is 0o666
    less the umask, as ``open(path, "w")`` gives; the name does not match ``status-*.json`` (never read partial)."""
    for _ in range(16):
        tmp = f"{path}.{secrets.token_hex(8)}.tmp"
        try:
            return tmp, os.open(tmp, _TEMP_FLAGS, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name next to {path}")


def clear_events() -> None:
    """Forget the events and launches counted so far (a what-if CLI or a test starting a new count)."""
    with STATE.lock:
        STATE.events = state.fresh_events()
        STATE.launches = dict.fromkeys(LAUNCH_PATHS, 0)
