"""The zero-copy wrappers of the patch table (docs/zero-copy.md section 7): Z1-Z3 for GDN, Z4 for Mamba2, Z6 for the
streaming-session hand-off, Z8 the tripwire where the radix tree takes a state (§12.5). Each asks :func:`.eligibility.decide` (once per pool) and otherwise runs SGLang's own code; while
a zero-copy verify layer runs, :data:`_ACTIVE` holds the forward's :class:`~.bookkeeping.VerifyTables` for the kernel
bindings (Z2, Z3, and Mamba2's conv and state update).
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

from sglang_mamba_dedup import report, state

from . import pool_of
from .eligibility import decide

#: this verify forward's VerifyTables while a zero-copy backend runs a target-verify layer
_ACTIVE: contextvars.ContextVar[Any] = contextvars.ContextVar("smd_zero_copy", default=None)

logger = logging.getLogger("sglang_mamba_dedup")


def _decided(obj) -> Any:
    """The zero-copy bookkeeping of the mamba pool behind ``obj`` (:func:`.pool_of`) where its gate passed, else
    None."""
    ps = state.pool_state_of(pool_of(obj))
    return ps.zero_copy if ps is not None else None


def _run_verify(tables, wrapped, args, kwargs):
    token = _ACTIVE.set(tables)
    try:
        return wrapped(*args, **kwargs)
    finally:
        _ACTIVE.reset(token)


def _stage_in_after_last_layer(zc, layer_id: int, slots, req_pool_indices) -> None:
    """After the last linear layer of an extend forward: every layer's new state into its request's row at once."""
    if layer_id != zc.layers[1] or slots is None or not slots.numel():
        return
    if slots.shape[0] != req_pool_indices.shape[0]:  # not an extend of whole requests: nothing SGLang 0.5.23 makes
        state.warn_once(
            "zero-copy stage-in shapes",
            "sglang-mamba-dedup: an extend with %d mamba slots for %d requests was not staged in; a later verify of "
            "these requests would seed from stale scratch (please report it)",
            slots.shape[0],
            req_pool_indices.shape[0],
        )
        return
    zc.stage_in(zc.pool.mamba_cache, slots, req_pool_indices)
    report.count("zc_stage_in_calls")


def _bind_extend(layer, forward_batch, *_args, **_kwargs):
    return layer, forward_batch


def gdn_forward_extend(wrapped, instance, args, kwargs):
    """Z1: a target verify runs with this forward's rows and seeds active; any other extend stages its rows in after
    its last linear layer."""
    zc = None if instance is None else decide(instance)  # installed only when asked for (the activation)
    if zc is None:
        return wrapped(*args, **kwargs)
    layer, forward_batch = _bind_extend(*args, **kwargs)
    metadata = instance.forward_metadata
    if forward_batch.forward_mode.is_target_verify():
        n = metadata.query_start_loc.shape[0] - 1  # the batch, as SGLang's row selection cuts it
        tables = zc.verify_tables(layer.layer_id, forward_batch.req_pool_indices, metadata.mamba_cache_indices[:n])
        return _run_verify(tables, wrapped, args, kwargs)
    out = wrapped(*args, **kwargs)
    _stage_in_after_last_layer(zc, layer.layer_id, metadata.mamba_cache_indices, forward_batch.req_pool_indices)
    return out


def select_rows(wrapped, instance, args, kwargs):
    """Z2: during a zero-copy verify the scratch row of a request is its ``req_pool_idx`` (padding: row 0)."""
    tables = _ACTIVE.get()
    return wrapped(*args, **kwargs) if tables is None else tables.rows


def triton_target_verify(wrapped, instance, args, kwargs):
    """Z3: SGLang's Triton verify reads its initial state from the scratch (``seeds``) instead of ``temporal``."""
    tables = _ACTIVE.get()
    buffer = kwargs.get("intermediate_states_buffer")
    if tables is None or buffer is None or kwargs.get("retrieve_parent_token") is not None:
        return wrapped(*args, **kwargs)
    return wrapped(*args, **dict(kwargs, ssm_states=buffer.flatten(0, 1), cache_indices=tables.seeds))


def _bind_mamba2(mixer, hidden_states, output, layer_id, forward_batch, *_args, **_kwargs):
    return layer_id, forward_batch


def mamba2_forward(wrapped, instance, args, kwargs):
    """Z4: as Z1, for a Mamba2 layer: a verify runs with the forward's rows and seeds active for the mixer's two
    kernel calls; any other extend stages its rows in after its last linear layer."""
    zc = None if instance is None else decide(instance)
    if zc is None:
        return wrapped(*args, **kwargs)
    layer_id, forward_batch = _bind_mamba2(*args, **kwargs)
    slots = instance.forward_metadata.mamba_cache_indices
    rpi = forward_batch.req_pool_indices
    if forward_batch.forward_mode.is_target_verify():
        return _run_verify(zc.verify_tables(layer_id, rpi, slots), wrapped, args, kwargs)
    out = wrapped(*args, **kwargs)
    _stage_in_after_last_layer(zc, layer_id, slots, rpi)
    return out


def mamba2_conv(wrapped, instance, args, kwargs):
    """Z4: the verify's conv writes its per-step windows on the requests' rows."""
    tables = _ACTIVE.get()
    if tables is None or kwargs.get("intermediate_conv_window") is None:
        return wrapped(*args, **kwargs)
    return wrapped(*args, **dict(kwargs, intermediate_state_indices=tables.rows))


def mamba2_ssm(wrapped, instance, args, kwargs):
    """Z4: the verify's selective-state update seeds from the scratch and writes its steps on the requests' rows."""
    tables = _ACTIVE.get()
    buffer = kwargs.get("intermediate_states_buffer")
    if tables is None or buffer is None or kwargs.get("retrieve_parent_token") is not None or not args:
        return wrapped(*args, **kwargs)
    kwargs = dict(
        kwargs,
        state_batch_indices=tables.seeds,
        intermediate_state_indices=tables.rows,
        cache_steps=buffer.shape[1],  # Mamba2's store pitch is this argument, not the buffer's stride
    )
    return wrapped(buffer.flatten(0, 1), *args[1:], **kwargs)


def session_kept(wrapped, instance, args, kwargs):
    """Z6: a streaming session keeps a finished turn's row and slot, and its next turn extends from
    ``temporal[slot]``: queue the live state to be materialized there before the next extend forward."""
    zc = _decided(instance)  # the pool of the session's radix cache
    req = args[0] if args else kwargs.get("req")
    kv = getattr(req, "kv", None)  # 0.5.23: the row and slot are the request's KV record's (``ReqKvInfo``)
    row, slot = getattr(kv, "req_pool_idx", None), getattr(kv, "mamba_pool_idx", None)
    kept = wrapped(*args, **kwargs)  # a kept turn's record moves to the session (``detach_kv``): read it first
    if kept is True and zc is not None and row is not None and slot is not None:
        zc.handoffs.append((int(row), slot))
    return kept


def before_extend(wrapped, instance, args, kwargs):
    """Z6: the queued hand-offs are materialized on the forward stream, before an extend's layers read the pool
    (where SGLang runs its own deferred copy-on-write)."""
    zc = None if getattr(instance, "is_draft_worker", False) else _decided(instance)
    if zc is not None and zc.handoffs:
        mode = (args[0] if args else kwargs["forward_batch"]).forward_mode
        if mode.is_extend() and not mode.is_target_verify():
            zc.materialize(zc.pool.mamba_cache)
            report.count("zc_materialize_calls")
    return wrapped(*args, **kwargs)


def _tree_problem(component) -> str | None:
    """Why the tree of this ``MambaComponent`` may take a stale state under zero-copy, or None: it must be exactly
    SGLang's ``UnifiedRadixCache`` (a subclass such as LMCache's is not analysed: review fix R1), with the extra
    buffer (the tree then takes only track slots; ``no_buffer`` donates the live slot, T24) and no int8 checkpoint
    pool (T23)."""
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    cache = getattr(component, "cache", None)
    if type(cache) is not UnifiedRadixCache:
        return f"the tree cache is {type(cache).__name__}, not SGLang's UnifiedRadixCache"
    if not getattr(cache, "enable_mamba_extra_buffer", False):
        return "the tree cache has no mamba extra buffer (no_buffer: it would take a request's stale live slot)"
    if getattr(component, "int8_ckpt_pool", None) is not None:
        return "the tree cache keeps int8 mamba checkpoints (not simulated under zero-copy)"
    return None


def radix_tripwire(wrapped, instance, args, kwargs):
    """Z8 (docs/zero-copy.md §12.5, HR6): where the tree takes a request's state (``MambaComponent.
    prepare_for_caching_req``), a zero-copy pool's tree must be one the gate allows. It should never fire (the gate
    refuses those settings); it is here because a wrong tree would corrupt prefix hits silently. ERROR once, strict
    stops; SGLang's own code runs either way."""
    if _decided(instance) is not None:
        problem = _tree_problem(instance)
        if problem is not None:
            msg = f"zero-copy commit is on for this pool, but {problem}: cached prefix states may be stale"
            if state.is_strict():
                raise RuntimeError(f"sglang-mamba-dedup strict mode: {msg}")
            if state.first_time("zero_copy_radix_tripwire"):
                logger.error("sglang-mamba-dedup: %s (please report it)", msg)
    return wrapped(*args, **kwargs)


def tree_evictions(wrapped, instance, args, kwargs):
    """``UnifiedRadixCache._evict``: every eviction the scheduler asks of the radix cache (``evict``,
    ``evict_for_alloc``), whichever tree core walks the tree (SGLang 0.5.23 defaults to its Rust core, which never
    calls the Python ``MambaComponent.evict_component`` this counter once wrapped: it counted nothing there). Counts
    the mamba states its ``EvictResult`` says were evicted from a zero-copy pool (``zc_tree_evictions``, in
    ``/get_server_info``), so the e2e's pressure proof can say the tree evicted under zero-copy; SGLang's answer is
    returned unchanged."""
    out = wrapped(*args, **kwargs)
    freed = getattr(out, "mamba_num_evicted", None)
    if type(freed) is int and freed > 0 and _decided(instance) is not None:
        report.count("zc_tree_evictions", freed)
    return out


def _bind_boundary(req, batch, result, i):
    return batch


def track_boundaries(wrapped, instance, args, kwargs):
    """``SchedulerBatchResultProcessor._mamba_check_track_boundary``: SGLang's host check, after a verify's results,
    that a request crossed a track boundary (its track row was written by that verify's commit and becomes the
    request's tracked state). Counts the crossings of a zero-copy pool's requests (``zc_track_rows``, in
    ``/get_server_info``: the radix proof's "track rows written", with no device read); SGLang's answer unchanged."""
    out = wrapped(*args, **kwargs)  # called through the class, ``args`` holds the processor first: wrapt passes it on
    if type(out) is tuple and out and out[0] is True:  # the fast path first: most calls cross nothing
        own = args if instance is not None else args[1:]
        try:
            batch = _bind_boundary(*own, **kwargs)
        except TypeError:  # a call shape SGLang does not make: its answer stands, uncounted
            return out
        if _decided(batch) is not None:
            report.count("zc_track_rows")
    return out
