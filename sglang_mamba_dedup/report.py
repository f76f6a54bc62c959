"""Process-local events and the optional status report file.

``status()`` in :mod:`.patch_state` says what was wrapped; this module records what *happened*: which conv
window layout the pool got (and its bytes) and how many commits ran through our kernels. When
``SGLANG_MAMBA_DEDUP_REPORT_DIR`` is set, each process writes ``status-<pid>-<token>.json`` there (the token,
random per process, keeps two PID namespaces sharing one folder apart) whenever that
changes (pool built; 1st, 2nd, 4th, 8th ... commit), so a driver can read what the *scheduler* process
saw. Counting is a Python integer increment: no device work, no host sync.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from . import versions
from .switch import current_mode_name

REPORT_DIR_ENV = "SGLANG_MAMBA_DEDUP_REPORT_DIR"

_lock = threading.Lock()
#: Commit counters: every verify commit, those our kernel served, and the same two for commits that also
#: carried a track set (SGLang saving mamba states into prefix-cache track slots).
COUNTERS = ("commit_calls", "ours_commit_calls", "track_commit_calls", "ours_track_commit_calls")
_events: dict[str, Any] = dict.fromkeys(COUNTERS, 0)


def events() -> dict[str, Any]:
    with _lock:
        return json.loads(json.dumps(_events))


def reset() -> None:
    """For tests: forget every event of this process."""
    with _lock:
        _events.clear()
        _events.update(dict.fromkeys(COUNTERS, 0))


def record_layout(state: str, reason: str | None, dense_bytes: int, physical_bytes: int, **extra: Any) -> None:
    """Record the conv-window layout of the pool just built: state is 'ours', 'upstream' or 'stock'."""
    with _lock:
        _events["dedup_layout"] = {
            "state": state,
            "reason": reason,
            "dense_bytes": int(dense_bytes),
            "physical_bytes": int(physical_bytes),
            **extra,
        }
    write()


def record_ledger(doc: dict[str, Any]) -> None:
    """Record the memory ledger of the pool just built (:mod:`.ledger`): ``ledgers`` keeps one per pool, in the
    order they were built (a draft head's pool next to the target's); ``ledger`` is the last one."""
    with _lock:
        _events["ledger"] = doc
        _events.setdefault("ledgers", []).append(doc)
    write()


def record_fault(name: str | None) -> None:
    """Record the negative-control fault in place in this process (:mod:`.faults`), or its removal."""
    with _lock:
        if name is None:
            _events.pop("fault", None)
        else:
            _events["fault"] = name
    if name is not None:
        write()


def count_commit(ours: bool, track: bool = False) -> None:
    """Count one verify commit: ``ours`` when our kernel served it, ``track`` when it had a track set."""
    with _lock:
        _events["commit_calls"] += 1
        if ours:
            _events["ours_commit_calls"] += 1
        if track:
            _events["track_commit_calls"] += 1
            if ours:
                _events["ours_track_commit_calls"] += 1
        n = _events["commit_calls"]
    if n & (n - 1) == 0:  # 1, 2, 4, 8, ...: a handful of writes over a whole run
        write()


_status_source: Callable[[], dict[str, dict[str, Any]]] = dict


def set_status_source(source: Callable[[], dict[str, dict[str, Any]]]) -> None:
    """Where :func:`snapshot` reads the per-patch status from (set by :mod:`.patch_state`, which sits above
    this module: the report never imports it)."""
    global _status_source
    _status_source = source


def snapshot() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "argv0": sys.argv[0] if sys.argv else "",
        "sglang_version": versions.installed_sglang_version(),
        "mode": current_mode_name(),
        "patches": {
            name: {"feature": st["feature"], "state": st["state"], "reason": st["reason"], "calls": st["calls"]}
            for name, st in _status_source().items()
        },
        "events": events(),
    }


_atexit_registered = False
_token: tuple[int, str] = (0, "")
_muted = 0


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """No report file is written inside the block, whatever ``SGLANG_MAMBA_DEDUP_REPORT_DIR`` says (the what-if
    CLIs, ``plan`` and ``demo``, which run the plugin in their own process but serve nothing); events are
    still recorded in memory."""
    global _muted
    _muted += 1
    try:
        yield
    finally:
        _muted -= 1


def report_path(directory: str) -> str:
    """This process's report file in ``directory``: ``status-<pid>-<token>.json``."""
    global _token
    pid = os.getpid()
    if _token[0] != pid:  # a forked child gets a token of its own
        _token = (pid, secrets.token_hex(4))
    return os.path.join(directory, f"status-{pid}-{_token[1]}.json")


def write() -> str | None:
    """Write this process's report if the report directory is configured; never raises.

    The first write also registers a last one at interpreter exit, so a process that ends normally leaves
    exact counts (a process killed by a signal keeps its last power-of-two report)."""
    global _atexit_registered
    directory = os.environ.get(REPORT_DIR_ENV)
    if not directory or _muted:
        return None
    if not _atexit_registered:
        _atexit_registered = True
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
    """Create ``<path>.<random>.tmp`` exclusively; returns (name, open fd). Unlike ``tempfile.mkstemp``
    the mode is 0o666 less the umask, as ``open(path, "w")`` would give, so a reader that could read the
    report before still can. The name does not match ``status-*.json``, so readers never see a partial file."""
    for _ in range(16):
        tmp = f"{path}.{secrets.token_hex(8)}.tmp"
        try:
            return tmp, os.open(tmp, _TEMP_FLAGS, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name next to {path}")
