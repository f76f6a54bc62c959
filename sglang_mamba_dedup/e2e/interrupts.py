"""Signals during an e2e call: no server is left behind.

Python's default SIGTERM and SIGHUP end the process without running its ``finally`` blocks, and the servers of
``--server`` run in their own sessions, so nothing else would stop them. :func:`handled` (around the whole
call, :func:`.cli.main`) turns SIGINT, SIGTERM and SIGHUP into :class:`Stopped` (a ``KeyboardInterrupt``),
so the stops in those ``finally`` blocks run. Only the first signal raises: every later one, and any signal
while a stop runs (:func:`stopping`), is held back and makes the stop hurry (SIGKILL now instead of the rest of
SIGTERM's grace time); a signal held back during a stop at the normal end is raised once that stop is done.
A signal the caller ignores (``nohup`` ignores SIGHUP) stays ignored.

A signal that cannot be caught (SIGKILL, or ``timeout -k`` after its grace time) runs no ``finally`` block: every
process the e2e starts itself (an engine process, a server) gets :func:`die_with_parent` as its ``preexec_fn``, so
the kernel ends it with the driver, and SGLang's own children end with it (its schedulers and detokenizer ask for
the same signal, ``kill_itself_when_parent_died``, once their imports are done: until then :mod:`.watchdog` stands
in for it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _resolve_prctl():
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


#: libc's prctl, looked up here in the parent (the child, between fork and exec, must not load libraries)
_PRCTL = _resolve_prctl()


def die_with_parent(parent: int | None = None) -> None:
    """``preexec_fn`` of the e2e's children: SIGKILL when the e2e process dies, however it dies (Linux
    ``PR_SET_PDEATHSIG``; elsewhere nothing). Runs in the child between fork and exec: system calls only. A
    ``parent`` (the driver's pid, :func:`dying_with`) already gone before the signal was asked for cannot send it:
    the child ends at once instead of running orphaned."""
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGKILL))  # 1: PR_SET_PDEATHSIG
        if parent is not None and os.getppid() != parent:
            os._exit(128 + int(signal.SIGKILL))


def dying_with(parent: int) -> Callable[[], None]:
    """The ``preexec_fn`` for a child of ``parent`` (``os.getpid()`` of the process that starts it)."""
    return functools.partial(die_with_parent, parent)


class Stopped(KeyboardInterrupt):
    """A signal ended the call (a ``KeyboardInterrupt``, so ``except Exception`` never swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


@dataclasses.dataclass
class _State:
    installed: bool = False
    stopping: int = 0  # stops running now (nested)
    raised: bool = False  # the first signal was raised: later ones are held back
    pending: int | None = None  # a signal held back during a stop, raised when it ends
    hurry: bool = False


_state = _State()


def _reset(installed: bool) -> None:
    global _state
    _state = _State(installed=installed)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _state.raised or _state.stopping:
        if not _state.hurry:
            # os.write: a print here could re-enter the print this signal interrupted
            os.write(2, f"{signal.Signals(signum).name} again: the servers get SIGKILL now\n".encode())
        _state.hurry = True
        if not _state.raised and _state.pending is None:
            _state.pending = signum
        return
    _state.raised = True
    raise Stopped(signum)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise (the first one) while the block runs; the old handlers come back after.
    Nothing is installed outside the main thread (Python delivers signals there only) or when already installed."""
    if _state.installed or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    mine = [sig for sig, h in old.items() if h is not signal.SIG_IGN]
    _reset(True)
    for sig in mine:
        signal.signal(sig, _on_signal)
    try:
        yield
    finally:
        for sig in mine:
            signal.signal(sig, old[sig])
        _reset(False)


@contextlib.contextmanager
def stopping() -> Iterator[None]:
    """Around a stop: no signal interrupts it (:func:`hurry` says one came); one held back is raised after."""
    with handled():
        _state.stopping += 1
        try:
            yield
        finally:
            _state.stopping -= 1
            if not _state.stopping and _state.pending is not None:
                signum, _state.pending = _state.pending, None
                _state.raised = True
                raise Stopped(signum)


def hurry() -> bool:
    """A signal came during a stop or after the first one: stop with SIGKILL now."""
    return _state.hurry
