"""The ``server_state`` feature: each scheduler's answer to SGLang's internal-state request (``/get_server_info``
lists them under ``internal_states``; ``/get_internal_state`` too) carries a ``mamba_dedup`` entry with what the
mamba sizing decided in that scheduler: the running-request cap asked for and the one in force, the mamba slots,
each pool's ledger (allocated and reserved bytes per buffer) and the plugin's decisions. Machine-readable, no log
reading; every value a plain JSON type (SGLang sends the state between processes with msgpack).
"""

from __future__ import annotations

import logging
from typing import Any

from sglang_mamba_dedup import report, state, versions
from sglang_mamba_dedup.patcher import self_first
from sglang_mamba_dedup.state import STATE

#: The key of the plugin's entry in a scheduler's internal state.
KEY = "mamba_dedup"

logger = logging.getLogger("sglang_mamba_dedup")


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def scheduler_state(scheduler: Any) -> dict[str, Any]:
    """The ``mamba_dedup`` entry of one scheduler's internal state."""
    rtp = getattr(scheduler, "req_to_token_pool", None)
    pool = getattr(rtp, "mamba_pool", None)
    events = report.events()
    server_args = getattr(scheduler, "server_args", None)
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
        if events.get("zero_copy") is None
        else {"decision": events["zero_copy"], **{k: events.get(k, 0) for k in state.ZERO_COPY_COUNTERS}},
        "commits": {k: events.get(k, 0) for k in state.COUNTERS[:2]},
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
