"""The ``server_state`` feature: each scheduler's answer to SGLang's internal-state request (``/get_server_info``
lists them under ``internal_states``; ``/get_internal_state`` too) carries a ``mamba_dedup`` entry with what the
mamba sizing decided in that scheduler: the running-request cap asked for and the one in force, the mamba slots,
each pool's ledger (allocated and reserved bytes per buffer) and the plugin's decisions. Machine-readable, no log
reading; every value a plain JSON type (SGLang sends the state between processes with msgpack).
"""

from __future__ import annotations

import logging
import operator
from typing import Any

from sglang_mamba_dedup import report, state, versions
from sglang_mamba_dedup.patcher import self_first
from sglang_mamba_dedup.state import STATE

from .zero_copy import pool_of

#: The key of the plugin's entry in a scheduler's internal state.
KEY = "mamba_dedup"

logger = logging.getLogger("sglang_mamba_dedup")


#: The integers msgpack carries (SGLang sends the state between processes with it): one beyond would make SGLang's
#: whole answer fail after our wrapper returned.
_MSGPACK_INTS = range(-(2**63), 2**64)


def _int_or_none(value: Any) -> int | None:
    """An integer as a plain ``int`` (numpy's and a 0-d tensor's too); None for anything else (a bool, a float, an
    integer msgpack cannot carry)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        got = operator.index(value)
    except (TypeError, ValueError, RuntimeError):  # not an integer (a float, a tensor of several values)
        return None
    return got if got in _MSGPACK_INTS else None


def zero_copy_decision(ps: state.PoolState | None) -> str | None:
    """A pool's zero-copy decision as the entry says it: ``on``, ``off: <reason>``, or None (not decided yet, or
    not asked for); the pool's own, never another pool's."""
    if ps is None or not ps.zero_copy_decided:
        return None
    if ps.zero_copy is not None:
        return "on"
    return None if ps.zero_copy_reason is None else f"off: {ps.zero_copy_reason}"


def scheduler_state(scheduler: Any) -> dict[str, Any]:
    """The ``mamba_dedup`` entry of one scheduler's internal state."""
    pool = pool_of(scheduler)
    events = report.events()
    server_args = getattr(scheduler, "server_args", None)
    ps = state.pool_state_of(pool)
    decision = zero_copy_decision(ps)
    return {
        "plugin_version": versions.plugin_version(),
        "mode": state.current_mode().value,
        "applied": sorted({s["feature"] for s in STATE.patch_status().values() if s.get("state") == "applied"}),
        "max_running_requests": {
            "asked": _int_or_none(getattr(server_args, "max_running_requests", None)),
            "effective": _int_or_none(getattr(scheduler, "max_running_requests", None)),
        },
        "mamba_slots": _int_or_none(getattr(pool, "size", None)),
        "ledgers": list(events.get("ledgers", [])),
        "zero_copy": None
        if decision is None
        else {
            "decision": decision,
            # the mamba strategy zero-copy serves with the radix cache on (its commits take track sets), else None
            "radix_cache": getattr(ps.zero_copy, "radix", None) if ps is not None else None,
            **{k: _int_or_none(events.get(k, 0)) for k in state.ZERO_COPY_COUNTERS},
        },
        "commits": {k: _int_or_none(events.get(k, 0)) for k in state.COUNTERS[:2]},
    }


def get_internal_state(wrapped, instance, args, kwargs):
    """``Scheduler.get_internal_state``: SGLang's answer, plus the plugin's entry (never an error of ours)."""
    out = wrapped(*args, **kwargs)
    internal = getattr(out, "internal_state", None)
    _, scheduler, _, _ = self_first(wrapped, instance, args)
    if isinstance(internal, dict) and scheduler is not None:
        try:
            internal[KEY] = scheduler_state(scheduler)
        except Exception as exc:  # noqa: BLE001 - the server's own answer must go out whatever ours does
            state.warn_once("server_state", "sglang-mamba-dedup: no %s entry in the internal state: %r", KEY, exc)
    return out
