"""The mamba memory ledger: what a ``MambaPool`` really holds, next to what SGLang's estimator reserved.

Every buffer of the pool's state (the fields of ``pool.mamba_cache`` and the tensors the pool keeps beside it,
such as the deduplicated window's physical buffers) is listed with its logical bytes (what its shape says)
and its physical bytes: the bytes of its storage, counted once however many views share it (the dedup view and
its physical buffer, the envelope layout's per-kind views of one byte buffer). The estimator's reservation is
what ``_handle_max_mamba_cache`` took out of the memory it was given (its argument minus its result), recorded
by the estimator patch. The pool patch builds the ledger, logs it in one INFO line (a WARNING when more is
allocated than was reserved, naming the largest buffers and the excess), and records it in the status report.

Pure bookkeeping: no SGLang import, no device work (shapes, strides and storage sizes only).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from .layout import GB

GIB = GB

logger = logging.getLogger("sglang_mamba_dedup")

_reservation: dict[str, Any] = {}


def record_reservation(reserved_bytes: int, **info: Any) -> None:
    """The estimator's reservation for the mamba pool of this process (the last estimate wins)."""
    _reservation.clear()
    _reservation.update(reserved_bytes=int(reserved_bytes), **info)


def reservation() -> dict[str, Any]:
    return dict(_reservation)


def reset() -> None:
    """Forget the reservation (tests)."""
    _reservation.clear()


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
    """``(name, tensors)`` of every buffer the pool holds: its state dataclass's fields, then the tensors
    it keeps as attributes (e.g. ``_intermediate_conv_window_phys``)."""
    out: list[tuple[str, list]] = []
    cache = getattr(pool, "mamba_cache", None)
    if cache is not None and dataclasses.is_dataclass(cache):
        for f in dataclasses.fields(cache):
            ts = _tensors(getattr(cache, f.name, None))
            if ts:
                out.append((f.name, ts))
    for name, value in sorted(vars(pool).items()):
        if name == "mamba_cache":
            continue
        ts = _tensors(value)
        if ts:
            out.append((name, ts))
    return out


def state_bytes(cache: Any) -> int:
    """Physical bytes of a state dataclass's fields: each storage once."""
    keys = {_storage_key(t) for f in dataclasses.fields(cache) for t in _tensors(getattr(cache, f.name, None))}
    return sum(k[2] for k in keys)


def build(pool: Any) -> dict[str, Any]:
    """The pool's ledger: per buffer ``logical`` and ``physical`` bytes (storage counted once, charged to
    the first buffer that holds it), the totals, and the estimator's reservation when one was recorded."""
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
    }
    res = reservation()
    if res:
        ledger["reserved_bytes"] = res["reserved_bytes"]
        ledger["reservation"] = res
        ledger["unreserved_bytes"] = max(0, allocated - res["reserved_bytes"])
    return ledger


def describe(ledger: dict[str, Any]) -> str:
    """One line: totals, then each buffer's physical (and logical, where they differ) size; a buffer whose storage
    is all counted under other buffers says so."""
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
    return f"{head}; GiB by buffer: " + ", ".join(parts)


#: An excess up to this many bytes is SGLang's bookkeeping tensors (e.g. the pool's 32-byte conv-slot descriptor,
#: seen on the H200 with 0.5.23), which no estimator prices: said at INFO with the bytes, not as a WARNING.
BOOKKEEPING_BYTES = 64 * 1024


def log(ledger: dict[str, Any]) -> None:
    """INFO, or WARNING when more is allocated than the estimator reserved (with the largest buffers); an excess
    of at most :data:`BOOKKEEPING_BYTES` stays INFO and names its bytes."""
    excess = ledger.get("unreserved_bytes", 0)
    if 0 < excess <= BOOKKEEPING_BYTES:
        logger.info(
            "sglang-mamba-dedup: mamba memory ledger: %s; %d bytes of bookkeeping tensors beyond the reservation",
            describe(ledger),
            excess,
        )
    elif excess > 0:
        biggest = sorted(ledger["buffers"].items(), key=lambda kv: -kv[1]["physical"])[:3]
        logger.warning(
            "sglang-mamba-dedup: mamba memory ledger: %s. %.3f GiB (%d bytes) more is allocated than was reserved: "
            "it comes out of memory nobody budgeted (largest buffers: %s)",
            describe(ledger),
            excess / GIB,
            excess,
            ", ".join(f"{n} {r['physical'] / GIB:.3f} GiB" for n, r in biggest),
        )
    else:
        logger.info("sglang-mamba-dedup: mamba memory ledger: %s", describe(ledger))
