"""Bytes per request of a mamba pool, by buffer: the one place the plugin turns cache params into sizes.

Read by the estimator patch (what the pool will allocate, so that it is reserved), by the gate (the
draft-token count that makes SGLang's estimator reserve the deduplicated scratch), and by the planner
(``sglang-mamba-dedup plan``). The pool itself is measured, not predicted, by :mod:`.ledger`; the tests compare
the two.

Duck-typed on SGLang's ``Mamba2CacheParams`` (``shape.conv`` a list of ``(dim, K-1)`` conv shapes, one per conv
kind; ``shape.temporal``; ``dtype.conv``/``dtype.temporal``; ``layers``). No torch or SGLang import.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any


@dataclasses.dataclass(frozen=True)
class RequestBytes:
    """Bytes of one request (one pool row) across all mamba layers of a rank.

    ``conv_state`` and ``ssm_state`` are one mamba slot (a running request holds one, more with prefix-cache
    tracking); the scratch is one speculative verify row: ``ssm_scratch`` the per-draft SSM snapshots (0 under
    ReplaySSM), ``conv_scratch_dense`` the ``D`` separate ``K-1`` windows, ``conv_scratch_physical`` what the pool
    really allocates for them (the sliding buffer ``D+K-2`` wide when deduplicated, else the dense windows),
    ``ring`` the ReplaySSM ring row where the release says its size (0 otherwise)."""

    conv_state: int
    ssm_state: int
    ssm_scratch: int
    conv_scratch_dense: int
    conv_scratch_physical: int
    ring: int = 0

    @property
    def state(self) -> int:
        return self.conv_state + self.ssm_state

    @property
    def scratch(self) -> int:
        """One verify row as allocated: SSM snapshots, the physical conv windows, the ring."""
        return self.ssm_scratch + self.conv_scratch_physical + self.ring


def _numel(shape: Any) -> int:
    return math.prod(int(x) for x in shape)


def conv_bytes(cache_params: Any) -> int:
    """One slot's conv state (every conv kind, every layer)."""
    return (
        sum(_numel(cs) for cs in cache_params.shape.conv) * cache_params.dtype.conv.itemsize * len(cache_params.layers)
    )


def ssm_bytes(cache_params: Any) -> int:
    """One slot's SSM (temporal) state, every layer."""
    return _numel(cache_params.shape.temporal) * cache_params.dtype.temporal.itemsize * len(cache_params.layers)


def conv_window_physical_bytes(cache_params: Any, draft_tokens: int) -> int:
    """One verify row of the deduplicated window: per conv kind ``[dim, D+K-2]`` (the window is the last axis)."""
    per_layer = 0
    for cs in cache_params.shape.conv:
        *lead, win = (int(x) for x in cs)
        per_layer += math.prod(lead) * (int(draft_tokens) + win - 1)
    return per_layer * cache_params.dtype.conv.itemsize * len(cache_params.layers)


def request_bytes(
    cache_params: Any,
    draft_tokens: int | None,
    *,
    dedup: bool,
    replayssm: bool = False,
    ring: int = 0,
) -> RequestBytes:
    """Per-request bytes by buffer. ``draft_tokens`` None (no speculative decoding): no scratch."""
    conv, ssm = conv_bytes(cache_params), ssm_bytes(cache_params)
    if not draft_tokens:
        return RequestBytes(conv, ssm, 0, 0, 0, 0)
    d = int(draft_tokens)
    dense = conv * d
    return RequestBytes(
        conv_state=conv,
        ssm_state=ssm,
        ssm_scratch=0 if replayssm else ssm * d,
        conv_scratch_dense=dense,
        conv_scratch_physical=conv_window_physical_bytes(cache_params, d) if dedup else dense,
        ring=int(ring) if replayssm else 0,
    )


def ring_bytes(cache_params: Any, record_len: int | None) -> int | None:
    """The ReplaySSM ring row as the installed release prices it (``replayssm_ring_bytes_per_req``), or None
    where the release has no such method."""
    fn = getattr(cache_params, "replayssm_ring_bytes_per_req", None)
    if fn is None or record_len is None:
        return None
    return int(fn(record_len=record_len))
