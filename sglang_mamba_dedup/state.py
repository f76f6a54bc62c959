"""This process's plugin state, in one object, :data:`STATE`, so that a reader sees all of it at once and a test
resets it with :func:`reset`. It imports nothing of the package but :mod:`.env`. Not here: the wrapped functions
(:data:`.installed.PATCHER`), the commit kernel and its plan cache (:func:`.kernels.load`, keyed weakly by the pool's
tensors), and what the plugin knows of each pool (:class:`PoolState`, on the pool itself).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from . import env

logger = logging.getLogger("sglang_mamba_dedup")

#: Every counter of the status report's events, declared here once and written only through :mod:`.report` (under
#: :attr:`ProcessState.lock`). The commit's: all, ours, and the same two for commits with a track set (prefix-cache
#: track slots); always present.
COUNTERS = ("commit_calls", "ours_commit_calls", "track_commit_calls", "ours_track_commit_calls")
#: Zero-copy's (present once counted): commits it served, those of them with a track set (the radix cache on),
#: track boundaries SGLang's host saw crossed by a zero-copy pool's requests (each one a track row the commit wrote
#: and the tree may take), extends staged in, streaming-session states materialized, mamba states the radix tree
#: evicted from a zero-copy pool (the e2e's pressure proof needs some).
ZERO_COPY_COUNTERS = (
    "zc_commit_calls",
    "zc_track_commits",
    "zc_track_rows",
    "zc_stage_in_calls",
    "zc_materialize_calls",
    "zc_tree_evictions",
)
#: The commit kernel's launches by path (:attr:`ProcessState.launches`, counted with each verify commit and each
#: zero-copy stage-in; the report's ``launches``): through DirectLaunch, or Triton's own.
LAUNCH_PATHS = ("direct", "triton")


def fresh_events() -> dict[str, Any]:
    return dict.fromkeys(COUNTERS, 0)


@dataclasses.dataclass
class ProcessState:
    # -- the switch, decided once per process and switch value by the activation
    mode: env.Mode | None = None  # the decision (None: not decided yet; current_mode() reads the environment)
    activation_key: tuple | None = None  # (switch value, SGLang version, what-if): a repeated call returns at once
    last_summary: str | None = None  # the activation's last log line (doctor, e2e and tests read it)
    programmatic: bool = False  # sglang_mamba_dedup.apply() was called: an unset switch then keeps its patches
    sglang_version: tuple[str | None] | None = None  # read once (a 1-tuple once known: the version may be None)

    # -- what is installed and alive
    commit_installed: bool = False  # our commit wrapper is in place (the gate needs it for a back-ported layout)
    # the per-patch status, for the report (set by installed, which the report does not import)
    patch_status: Callable[[], dict[str, dict[str, Any]]] = dict
    # pools alive with our back-ported deduplicated window: SGLang's own commit cannot read them
    live_backport_pools: weakref.WeakSet = dataclasses.field(default_factory=weakref.WeakSet)

    # -- the estimator's last decision, for the ledger of the next pool built and the planner (written and read
    #    only through :mod:`.ledger`: record_reservation / reservation / last_estimate)
    estimate: dict[str, Any] = dataclasses.field(default_factory=dict)  # reserved bytes, draft tokens, top-up, reason
    estimate_owner: list = dataclasses.field(default_factory=list)  # a weak reference to the first pool built after

    # -- events (the status report) and warnings said once
    events: dict[str, Any] = dataclasses.field(default_factory=fresh_events)
    warned: set = dataclasses.field(default_factory=set)
    launches: dict = dataclasses.field(default_factory=lambda: dict.fromkeys(LAUNCH_PATHS, 0))  # by LAUNCH_PATHS
    report_muted: int = 0
    report_token: tuple[int, str] = (0, "")
    report_atexit: bool = False
    lock: Any = dataclasses.field(default_factory=threading.Lock)


STATE = ProcessState()

#: The one attribute the plugin sets on a SGLang mamba pool: its :class:`PoolState`.
POOL_ATTR = "_smd_pool"


@dataclasses.dataclass
class PoolState:
    """What the plugin knows of one of SGLang's mamba pools, kept on the pool (:data:`POOL_ATTR`) so that it lives
    and dies with it: the layout the pool patch found or built, whether our commit kernel may serve it, and
    zero-copy's decision, its reason and ``accepted`` table (their only home: the status report's ``zero_copy``
    event is a log of the last pool decided, never read back). The ledger counts
    :meth:`ledger_buffers` as the pool's buffers."""

    layout: str | None = None  # "ours" (back-port), "upstream" (SGLang's deduplicated window) or "stock"
    commit_ok: bool = False  # our commit kernel serves this pool (read by the commit and zero-copy's gate)
    zero_copy_decided: bool = False  # zero-copy's gate ran for this pool
    zero_copy: Any = None  # its ZeroCopy bookkeeping where the gate passed (patches.zero_copy.bookkeeping)
    zero_copy_reason: str | None = None  # why the gate refused this pool (None: on, undecided, or not asked for)
    accepted: Any = None  # zero-copy's int32 ``accepted`` table, one per scratch row, allocated with the pool

    def ledger_buffers(self) -> list[tuple[str, Any]]:
        return [("accepted", self.accepted)] if self.accepted is not None else []


def pool_state(pool: Any) -> PoolState:
    """``pool``'s :class:`PoolState`, made on first use."""
    got = pool_state_of(pool)
    if got is None:
        got = PoolState()
        setattr(pool, POOL_ATTR, got)
    return got


def pool_state_of(pool: Any) -> PoolState | None:
    """``pool``'s :class:`PoolState`, or None where the plugin has recorded nothing for it (or ``pool`` is None)."""
    got = getattr(pool, POOL_ATTR, None) if pool is not None else None
    return got if isinstance(got, PoolState) else None


def reset() -> None:
    """Forget everything this process remembered (tests). The patches themselves are reverted by the patcher."""
    fresh = ProcessState()
    for f in dataclasses.fields(ProcessState):
        if f.name not in ("lock", "report_atexit", "patch_status"):
            setattr(STATE, f.name, getattr(fresh, f.name))


def current_mode() -> env.Mode:
    """The activation's decision for this process, or (before any) what the environment says."""
    return STATE.mode if STATE.mode is not None else env.switch_mode()


def is_strict() -> bool:
    return current_mode() is env.Mode.STRICT


def first_time(key: Any) -> bool:
    """True the first time ``key`` is asked in this process: for warnings said once."""
    with STATE.lock:
        if key in STATE.warned:
            return False
        STATE.warned.add(key)
        return True


def warn_once(key: Any, msg: str, *args: Any) -> None:
    """Log ``msg`` at WARNING once per process for ``key``."""
    if first_time(key):
        logger.warning(msg, *args)
