"""The mamba memory ledger: what a ``MambaPool`` really holds, next to what SGLang's estimator reserved for it.

Every buffer of the pool's state (its state dataclass's fields and the tensors the pool keeps beside it) with its
logical bytes (what its shape says) and physical bytes (its storage, counted once however many views share it:
the dedup view and its buffer, the envelope layout's per-kind views of one byte buffer). The reservation is what
``_handle_max_mamba_cache`` took out of the memory it was given (its argument minus its result), recorded by the
estimator patch. Pure bookkeeping: no SGLang import, no device work.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from typing import Any

from .sizing import GIB
from .state import POOL_ATTR, STATE

#: zero-copy's ``accepted`` table as the ledger names it (the pool's :class:`~.state.PoolState`)
ACCEPTED_BUFFER = f"{POOL_ATTR}.accepted"

logger = logging.getLogger("sglang_mamba_dedup")


def reservation() -> dict[str, Any]:
    """The estimator's reservation for the next pool (:func:`record_reservation`; empty: none, or bytes unknown)."""
    return dict(STATE.estimate) if "reserved_bytes" in STATE.estimate else {}


def _reference(pool: Any) -> Any:
    """A weak reference to ``pool`` where it takes one (a pool must not be kept alive by its ledger)."""
    try:
        return weakref.ref(pool)
    except TypeError:
        return lambda: pool


def _tensors(value: Any) -> list:
    """The tensors in a buffer value: a tensor, or a list/tuple of them (one per conv kind)."""
    if hasattr(value, "untyped_storage") and hasattr(value, "element_size"):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for t in value if hasattr(t, "untyped_storage") and hasattr(t, "element_size")]
    return []


def _storage_key(t: Any) -> tuple:
    s = t.untyped_storage()
    return (str(t.device), s.data_ptr(), s.nbytes())


def buffers(pool: Any) -> list[tuple[str, list]]:
    """``(name, tensors)`` of every buffer: the state dataclass's fields, then the pool's tensor attributes."""
    cache = getattr(pool, "mamba_cache", None)
    fields = dataclasses.fields(cache) if dataclasses.is_dataclass(cache) else ()
    state = [(f.name, getattr(cache, f.name, None)) for f in fields]
    attrs = []
    for name, value in sorted(vars(pool).items()):
        if name == "mamba_cache":
            continue
        if hasattr(value, "ledger_buffers"):  # the plugin's PoolState: its tensors are the pool's buffers too
            attrs += [(f"{name}.{sub}", t) for sub, t in value.ledger_buffers()]
        else:
            attrs.append((name, value))
    return [(name, ts) for name, value in state + attrs if (ts := _tensors(value))]


def state_bytes(cache: Any) -> int:
    """Physical bytes of a state dataclass's fields: each storage once."""
    keys = {_storage_key(t) for f in dataclasses.fields(cache) for t in _tensors(getattr(cache, f.name, None))}
    return sum(k[2] for k in keys)


def _is_index(t: Any) -> bool:
    """A 32- or 64-bit integer tensor: slot numbers or indices (a state is floating point, or bytes)."""
    dtype = t.dtype
    return not (dtype.is_floating_point or dtype.is_complex) and dtype.is_signed and t.element_size() >= 4


def bookkeeping_buffers(pool: Any) -> list[str]:
    """The pool's own bookkeeping tensors: integer tensors it keeps beside its state (SGLang 0.5.12's
    ``free_slots`` list, slot descriptors). They grow with the slots, and no estimator prices them (zero-copy's
    ``accepted`` table is not one of them: the plugin's estimator reserves it)."""
    cache = getattr(pool, "mamba_cache", None)
    state = {f.name for f in dataclasses.fields(cache)} if dataclasses.is_dataclass(cache) else set()
    priced = state | {ACCEPTED_BUFFER}  # zero-copy's table: the plugin's estimator reserves it
    return [name for name, ts in buffers(pool) if name not in priced and all(_is_index(t) for t in ts)]


def build(pool: Any) -> dict[str, Any]:
    """The pool's ledger: per buffer ``logical`` and ``physical`` bytes (a storage is charged to the first buffer
    that holds it), the totals, its bookkeeping tensors' bytes and the estimator's reservation for this pool."""
    owner: dict[tuple, str] = {}
    rows: dict[str, dict[str, Any]] = {}
    for name, ts in buffers(pool):
        logical = physical = 0
        shares: list[str] = []
        for t in ts:
            logical += t.numel() * t.element_size()
            key = _storage_key(t)
            if key not in owner:
                owner[key] = name
                physical += key[2]
            elif owner[key] != name and owner[key] not in shares:
                shares.append(owner[key])
        rows[name] = {"logical": logical, "physical": physical}
        if shares:
            rows[name]["storage_of"] = shares  # its storage is charged to these buffers
    allocated = sum(r["physical"] for r in rows.values())
    ledger: dict[str, Any] = {
        "pool": type(pool).__name__,
        "buffers": rows,
        "allocated_bytes": allocated,
        "logical_bytes": sum(r["logical"] for r in rows.values()),
        "bookkeeping_bytes": sum(rows[name]["physical"] for name in bookkeeping_buffers(pool)),
    }
    res = reservation()
    if not res:
        return ledger
    # an estimate belongs to the first pool built after it: a second pool (e.g. a draft head's) has none of its own
    if not STATE.estimate_owner:
        STATE.estimate_owner.append(_reference(pool))
    mine = STATE.estimate_owner[0]() is pool
    ledger["reservation"] = res if mine else None
    if mine:
        ledger["reserved_bytes"] = res["reserved_bytes"]
        ledger["unreserved_bytes"] = max(0, allocated - res["reserved_bytes"])
    return ledger


def describe(ledger: dict[str, Any]) -> str:
    """One line: totals, then each buffer's physical (and logical, where they differ) size."""
    parts = []
    for name, r in ledger["buffers"].items():
        if r["physical"] == 0 and r.get("storage_of"):
            parts.append(f"{name}: the storage of {' and '.join(r['storage_of'])}, counted there")
            continue
        text = f"{name} {r['physical'] / GIB:.3f}"
        if r["logical"] != r["physical"]:
            text += f" (logical {r['logical'] / GIB:.3f})"
        parts.append(text)
    head = f"{ledger['pool']} allocates {ledger['allocated_bytes'] / GIB:.3f} GiB"
    if "reserved_bytes" in ledger:
        head += f", the estimator reserved {ledger['reserved_bytes'] / GIB:.3f} GiB"
    elif "reservation" in ledger:
        head += ", no reservation of its own (the estimate was for the pool built before it)"
    return f"{head}; GiB by buffer: " + ", ".join(parts)


#: An excess up to this many bytes beyond the pool's recognised bookkeeping tensors (:func:`bookkeeping_buffers`)
#: is SGLang's small unrecognised ones (e.g. the pool's 32-byte conv-slot descriptor, seen on the H200 with
#: 0.5.23), which no estimator prices: said at INFO with the bytes, not as a WARNING.
BOOKKEEPING_BYTES = 64 * 1024


def tolerance(ledger: dict[str, Any]) -> int:
    """The excess that is bookkeeping: the pool's own index tensors (they grow with its slots, e.g. 0.5.12's int64
    ``free_slots``, 8 bytes a slot) plus :data:`BOOKKEEPING_BYTES` for the small unrecognised ones."""
    return BOOKKEEPING_BYTES + ledger.get("bookkeeping_bytes", 0)


def log(ledger: dict[str, Any]) -> None:
    """INFO, or WARNING when more than the :func:`tolerance` is allocated beyond the reservation."""
    excess = ledger.get("unreserved_bytes", 0)
    if 0 < excess <= tolerance(ledger):
        logger.info(
            f"sglang-mamba-dedup: mamba memory ledger: {describe(ledger)}; {excess} bytes of bookkeeping tensors "
            "beyond the reservation"
        )
    elif excess > 0:
        biggest = sorted(ledger["buffers"].items(), key=lambda kv: -kv[1]["physical"])[:3]
        largest = ", ".join(f"{n} {r['physical'] / GIB:.3f} GiB" for n, r in biggest)
        logger.warning(
            f"sglang-mamba-dedup: mamba memory ledger: {describe(ledger)}. {excess / GIB:.3f} GiB ({excess} bytes) more "
            f"is allocated than was reserved: it comes out of memory nobody budgeted (largest buffers: {largest})"
        )
    else:
        logger.info("sglang-mamba-dedup: mamba memory ledger: %s", describe(ledger))


def forget_reservation() -> None:
    """Forget the estimator's reservation (the estimator patch before it decides again; the what-if CLIs; tests)."""
    STATE.estimate = {}
    STATE.estimate_owner.clear()


def record_reservation(reserved_bytes: int | None, **decision: Any) -> None:
    """The estimator patch's one door: its decision (applied, reason, top-up, draft tokens ...) and the bytes it
    reserved for the next pool built (None: not known, so no pool's ledger gets a reservation)."""
    STATE.estimate = dict(decision) if reserved_bytes is None else {"reserved_bytes": int(reserved_bytes), **decision}
    STATE.estimate_owner.clear()


def last_estimate() -> dict[str, Any]:
    """The estimator's last decision as recorded (a copy; empty: none since the last :func:`forget_reservation`),
    for the planner, which runs SGLang's estimator on the CPU and reads what the plugin decided there."""
    return dict(STATE.estimate)
