"""The zero-copy commit (opt-in, :data:`~sglang_mamba_dedup.env.ZERO_COPY`; SGLang 0.5.23; GDN and Mamba2 with
SGLang's Triton verify kernels): a request's live SSM state stays in the scratch column where its last verify wrote the accepted step, the
next verify reads it there, and the commit moves no SSM bytes. Design, every other reader of the state, and why each
excluded case keeps today's commit: docs/zero-copy.md (hooks Z1-Z4 and Z6 here, Z5 in :mod:`.verify_commit`).

Per pool (:class:`ZeroCopy`, decided once at the backend's first extend): ``accepted[row]``, how many tokens the
row's last verify accepted; the scratch rows are the requests' ``req_pool_idx`` (row 0: padding, the discard row).
No host sync anywhere: every index is computed on the device, inside the verify's CUDA graph where there is one.
"""

from __future__ import annotations

import contextvars
import logging
import os
from typing import Any

from sglang_mamba_dedup import env, report, state
from sglang_mamba_dedup.state import STATE

logger = logging.getLogger("sglang_mamba_dedup")

#: the pool's ZeroCopy while a zero-copy backend runs a target verify (read by Z2 and Z3)
_ACTIVE: contextvars.ContextVar[Any] = contextvars.ContextVar("smd_zero_copy", default=None)
_MISSING = object()

#: (setting, is it safe, why not) - each excluded case of docs/zero-copy.md section 6 that a setting decides.
_SETTINGS = (
    (
        "speculative_algorithm",
        lambda v: getattr(v, "name", str(v)).upper() in ("EAGLE", "NEXTN", "MTP"),
        "not NEXTN/EAGLE",
    ),
    ("speculative_eagle_topk", lambda v: v is None or int(v) <= 1, "topk > 1 (tree verify)"),
    ("disable_radix_cache", lambda v: bool(v), "the radix cache is on (it snapshots the committed state)"),
    ("enable_linear_replayssm", lambda v: not v, "ReplaySSM owns the state"),
    ("enable_linear_replayssm_spec", lambda v: not v, "ReplaySSM owns the commit"),
    ("disaggregation_mode", lambda v: str(v) == "null", "PD disaggregation transfers the committed state"),
    ("pp_size", lambda v: int(v) == 1, "pipeline parallelism (delayed commit)"),
    ("enable_dp_attention", lambda v: not v, "DP attention (padded warm-up rows)"),
    ("enable_two_batch_overlap", lambda v: not v, "two-batch overlap (not analysed)"),
    ("enable_mixed_chunk", lambda v: not v, "mixed chunked prefill (a decode row inside an extend)"),
    ("speculative_adaptive", lambda v: not v, "an adaptive draft count"),
)


def read_settings() -> dict[str, Any]:
    """The resolved settings :data:`_SETTINGS` names, from SGLang 0.5.23's runtime-context bags (what resolution
    decided), the operator's record where no bag has the name; a name found nowhere is missing (and refused)."""
    from sglang.srt import runtime_context as rc

    sources = []
    for getter in ("get_spec", "get_memory", "get_disagg", "get_schedule", "get_exec", "get_server_args"):
        try:
            sources.append(getattr(rc, getter)())
        except Exception:  # noqa: BLE001 - a bag not published in this process: the next source answers
            continue
    mamba = [m for m in (getattr(s, "mamba", None) for s in sources) if m is not None][:1]
    found: dict[str, Any] = {}
    for name, _ok, _why in _SETTINGS:
        for source in (mamba if name.startswith("enable_linear_replayssm") else []) + sources:
            value = getattr(source, name, _MISSING)
            if value is not _MISSING:
                found[name] = value
                break
    return found


def settings_problem(settings: dict[str, Any]) -> str | None:
    """Why these settings keep today's commit (the first excluded case met), or None; pure."""
    for name, ok, why in _SETTINGS:
        value = settings.get(name, _MISSING)
        if value is _MISSING:
            if name == "speculative_adaptive":  # a 0.5.23 option that may be absent from a bag: absent is off
                continue
            return f"cannot read SGLang's setting {name}"
        try:
            if not ok(value):
                return f"{why} ({name}={value!r})"
        except (TypeError, ValueError):
            return f"{name}={value!r} is not understood"
    if os.environ.get("SGLANG_ENABLE_PP_SPEC", "").strip().lower() in ("1", "true", "yes", "on"):
        return "SGLANG_ENABLE_PP_SPEC is set (pipeline stable rows)"
    return None


def _verify_kernel_problem(backend) -> str | None:
    """GDN: SGLang's Triton verify must be the one that runs; Mamba2: the Triton selective-state update (H1 is
    proven for those kernels only)."""
    if type(backend).__name__ == "Mamba2AttnBackend":
        from sglang.kernels.ops.mamba.triton_ops import ssu_dispatch

        ssu = type(getattr(ssu_dispatch, "_mamba_ssu_backend", None)).__name__
        return None if ssu == "TritonSSUBackend" else f"the Mamba2 state update is {ssu}, not SGLang's Triton one"
    verify = getattr(getattr(backend, "kernel_dispatcher", None), "verify_kernel", None)
    if type(verify).__name__ != "TritonGDNKernel":
        return f"the verify kernel is {type(verify).__name__}, not SGLang's Triton GDN verify"
    return None


def backend_problem(backend) -> str | None:
    """Why this GDN or Mamba2 backend's pool keeps today's commit (pool, scratch, verify kernel, side states)."""
    rtp = getattr(backend, "req_to_token_pool", None)
    pool = getattr(rtp, "mamba_pool", None)
    if pool is None or not getattr(pool, "_smd_commit_ok", False):
        return "the plugin's commit does not serve this pool"
    cache = pool.mamba_cache
    scratch = getattr(cache, "intermediate_ssm", None)
    if scratch is None or scratch.dim() != cache.temporal.dim() + 1:  # [L, S+1, D, *state] vs [L, slots+1, *state]
        return "no per-step SSM scratch (a draft's pool, or ReplaySSM)"
    if scratch.dtype != cache.temporal.dtype:
        return f"the scratch dtype {scratch.dtype} differs from the state's {cache.temporal.dtype}"
    rows = getattr(rtp, "size", None)
    if not isinstance(rows, int) or scratch.shape[1] < rows + 1:
        return f"{scratch.shape[1]} scratch rows for {rows} request rows (one per request row, plus row 0)"
    if getattr(backend, "accept_lens_pool", None) is not None:
        return "KDA fused accept"
    problem = _verify_kernel_problem(backend)
    if problem:
        return problem
    for side, field in (("short_conv_pool", "conv_state"), ("ngram_pool", "context")):
        if getattr(getattr(rtp, side, None), field, None) is not None:
            return f"the model has PLE side states ({side})"
    return None


def prepare(pool) -> None:
    """At pool build (zero-copy asked for): the ``accepted`` table, so that it is allocated with the pool and never
    inside a CUDA-graph capture (where the decision may come first)."""
    import torch

    scratch = getattr(getattr(pool, "mamba_cache", None), "intermediate_ssm", None)
    if scratch is not None and scratch.dim() >= 3:
        pool._smd_accepted = torch.ones(scratch.shape[1], dtype=torch.int32, device=scratch.device)


class ZeroCopy:
    """One pool's zero-copy bookkeeping: ``accepted`` (int32, one entry per scratch row, on the pool's device)."""

    def __init__(self, pool) -> None:
        scratch = pool.mamba_cache.intermediate_ssm
        self.pitch = scratch.shape[2]  # the allocated draft-step pitch of a scratch row
        if getattr(pool, "_smd_accepted", None) is None:
            prepare(pool)
        self.accepted = pool._smd_accepted
        self.handoffs: list = []  # (row, slot tensor) of streaming-session turns kept, to materialize (Z6)

    def stage_in(self, layer_cache, slots, rows) -> None:
        """After an extend wrote ``temporal[slots]`` of one layer: copy it into scratch column 0 of each request's row,
        and ``accepted[row] = 1`` (the next verify seeds from there). Padding (slot < 0) writes row 0."""
        import torch

        valid = slots >= 0
        row = torch.where(valid, rows, torch.zeros_like(rows)).long()
        layer_cache.intermediate_ssm[row, 0] = layer_cache.temporal[slots.clamp(min=0).long()]
        self.accepted[row] = 1

    def seed(self, rows, slots):
        """Where each request's live state is, as an index into the scratch viewed ``[rows * pitch, ...]``: row
        ``* pitch + accepted - 1``; -1 (a zero state, as SGLang pads) for padding."""
        import torch

        n = min(rows.shape[0], slots.shape[0])
        row = rows[:n].long()
        at = row * self.pitch + self.accepted.index_select(0, row).long() - 1
        return torch.where(slots[:n] >= 0, at, torch.full_like(at, -1)).to(slots.dtype)

    def accept(self, steps, slots, rows) -> None:
        """The commit's bookkeeping: ``accepted[row] = step + 1`` for every committed row (the rest write row 0)."""
        import torch

        valid = (steps >= 0) & (slots >= 0)
        row = torch.where(valid, rows[: steps.shape[0]].long(), torch.zeros_like(steps, dtype=torch.long))
        self.accepted[row] = (steps + 1).to(torch.int32)

    def materialize(self, cache) -> None:
        """Z6: ``temporal[slot] = scratch[row, accepted[row] - 1]`` (all layers, one indexed copy) for the queued
        hand-offs, then forget them."""
        import torch

        device = self.accepted.device
        rows = torch.tensor([row for row, _ in self.handoffs], dtype=torch.long, device=device)
        slots = torch.cat([slot.reshape(1) for _, slot in self.handoffs]).to(device=device, dtype=torch.long)
        self.handoffs.clear()
        cache.temporal[:, slots] = cache.intermediate_ssm[:, rows, self.accepted.index_select(0, rows).long() - 1]


def _capturing() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def _decide(backend) -> ZeroCopy | None:
    """This backend's pool's zero-copy, decided once per pool (one log line either way; strict stops)."""
    pool = getattr(getattr(backend, "req_to_token_pool", None), "mamba_pool", None)
    if pool is None:
        return None
    decided = getattr(pool, "_smd_zc", _MISSING)
    if decided is not _MISSING:
        return decided if isinstance(decided, ZeroCopy) else None
    if not env.enabled(env.ZERO_COPY):  # not asked for (a test that applied every feature): stock, silently
        pool._smd_zc = None
        return None
    reason = backend_problem(backend)
    if reason is None and getattr(pool, "_smd_accepted", None) is None and _capturing():
        reason = "the pool was built without the accepted table and this first verify is inside a CUDA-graph capture"
    if reason is None:
        try:
            reason = settings_problem(read_settings())
        except Exception as exc:  # noqa: BLE001 - unreadable settings: not proven safe
            reason = f"cannot read SGLang's settings ({type(exc).__name__}: {exc})"
    zc = ZeroCopy(pool) if reason is None else None
    pool._smd_zc = zc
    if zc is None:
        report.record_zero_copy(f"off: {reason}")
        if state.is_strict():
            raise RuntimeError(f"sglang-mamba-dedup strict mode: {env.ZERO_COPY} asked for, but {reason}")
        logger.warning("sglang-mamba-dedup: zero-copy commit asked for, stays off for this pool: %s", reason)
    else:
        STATE.zero_copy = zc
        report.record_zero_copy("on")
        logger.info(
            "sglang-mamba-dedup: zero-copy commit on (%d scratch rows of %d steps): verify seeds from the scratch, "
            "the commit moves no SSM bytes",
            zc.accepted.shape[0],
            zc.pitch,
        )
    return zc


def _bind_extend(layer, forward_batch, *_args, **_kwargs):
    return layer, forward_batch


def gdn_forward_extend(wrapped, instance, args, kwargs):
    """Z1: a target verify runs with this pool's :class:`ZeroCopy` active; any other extend stages its rows in."""
    zc = None if instance is None else _decide(instance)  # installed only when asked for (the activation)
    if zc is None:
        return wrapped(*args, **kwargs)
    layer, forward_batch = _bind_extend(*args, **kwargs)
    if forward_batch.forward_mode.is_target_verify():
        token = _ACTIVE.set(zc)
        try:
            return wrapped(*args, **kwargs)
        finally:
            _ACTIVE.reset(token)
    out = wrapped(*args, **kwargs)
    slots = instance.forward_metadata.mamba_cache_indices
    if slots is not None and slots.numel():
        zc.stage_in(
            instance.req_to_token_pool.mamba2_layer_cache(layer.layer_id), slots, forward_batch.req_pool_indices
        )
        STATE.events["zc_stage_in_calls"] = STATE.events.get("zc_stage_in_calls", 0) + 1
    return out


def _bind_select(default_indices, req_pool_indices, valid, pool_size, *_args, **_kwargs):
    return req_pool_indices, valid


def select_rows(wrapped, instance, args, kwargs):
    """Z2: during a zero-copy verify the scratch row of a request is its ``req_pool_idx`` (padding: row 0)."""
    if _ACTIVE.get() is None:
        return wrapped(*args, **kwargs)
    import torch

    req_pool_indices, valid = _bind_select(*args, **kwargs)
    rows = req_pool_indices[: valid.shape[0]]
    return torch.where(valid, rows, torch.zeros_like(rows)).to(torch.int32)


def triton_target_verify(wrapped, instance, args, kwargs):
    """Z3: SGLang's Triton verify reads its initial state from the scratch (``seed``) instead of ``temporal``."""
    zc = _ACTIVE.get()
    buffer = kwargs.get("intermediate_states_buffer")
    if zc is None or buffer is None or kwargs.get("retrieve_parent_token") is not None:
        return wrapped(*args, **kwargs)
    seed = zc.seed(kwargs["intermediate_state_indices"], kwargs["cache_indices"])
    kwargs = dict(kwargs, ssm_states=buffer.flatten(0, 1), cache_indices=seed)
    return wrapped(*args, **kwargs)


#: (zero-copy, rows, slots) while a zero-copy Mamba2 backend runs a target verify layer (read by the Z4 bindings)
_MAMBA2: contextvars.ContextVar[Any] = contextvars.ContextVar("smd_zero_copy_mamba2", default=None)


def _bind_mamba2(mixer, hidden_states, output, layer_id, forward_batch, *_args, **_kwargs):
    return layer_id, forward_batch


def mamba2_forward(wrapped, instance, args, kwargs):
    """Z4: as Z1, for a Mamba2 layer: a verify runs with its rows (``req_pool_idx``, padding row 0) and seeds active
    for the mixer's two kernel calls; any other extend stages its rows in."""
    zc = None if instance is None else _decide(instance)
    if zc is None:
        return wrapped(*args, **kwargs)
    import torch

    layer_id, forward_batch = _bind_mamba2(*args, **kwargs)
    slots = instance.forward_metadata.mamba_cache_indices
    rpi = forward_batch.req_pool_indices
    if forward_batch.forward_mode.is_target_verify():
        n = slots.shape[0]
        rows = torch.where(slots >= 0, rpi[:n], torch.zeros_like(rpi[:n])).to(torch.int32)
        token = _MAMBA2.set((zc, rows, slots))
        try:
            return wrapped(*args, **kwargs)
        finally:
            _MAMBA2.reset(token)
    out = wrapped(*args, **kwargs)
    if slots is not None and slots.numel() and slots.shape[0] == rpi.shape[0]:
        zc.stage_in(instance.req_to_token_pool.mamba2_layer_cache(layer_id), slots, rpi)
        STATE.events["zc_stage_in_calls"] = STATE.events.get("zc_stage_in_calls", 0) + 1
    return out


def mamba2_conv(wrapped, instance, args, kwargs):
    """Z4: the verify's conv writes its per-step windows on the requests' rows."""
    active = _MAMBA2.get()
    if active is None or kwargs.get("intermediate_conv_window") is None:
        return wrapped(*args, **kwargs)
    return wrapped(*args, **dict(kwargs, intermediate_state_indices=active[1]))


def mamba2_ssm(wrapped, instance, args, kwargs):
    """Z4: the verify's selective-state update seeds from the scratch and writes its steps on the requests' rows."""
    active = _MAMBA2.get()
    buffer = kwargs.get("intermediate_states_buffer")
    if active is None or buffer is None or kwargs.get("retrieve_parent_token") is not None or not args:
        return wrapped(*args, **kwargs)
    zc, rows, slots = active
    kwargs = dict(
        kwargs,
        state_batch_indices=zc.seed(rows, slots),
        intermediate_state_indices=rows,
        cache_steps=buffer.shape[1],  # Mamba2's store pitch is this argument, not the buffer's stride
    )
    return wrapped(buffer.flatten(0, 1), *args[1:], **kwargs)


def session_kept(wrapped, instance, args, kwargs):
    """Z6: a streaming session keeps a finished turn's row and slot, and its next turn extends from
    ``temporal[slot]``: queue the live state to be materialized there before the next extend forward."""
    zc = STATE.zero_copy
    req = args[0] if args else kwargs.get("req")
    row = getattr(req, "req_pool_idx", None)
    slot = getattr(getattr(req, "kv", None), "mamba_pool_idx", None)
    kept = wrapped(*args, **kwargs)
    if kept is True and zc is not None and row is not None and slot is not None:
        zc.handoffs.append((int(row), slot))
    return kept


def before_extend(wrapped, instance, args, kwargs):
    """Z6: the queued hand-offs are materialized on the forward stream, before an extend's layers read the pool
    (where SGLang runs its own deferred copy-on-write)."""
    zc = STATE.zero_copy
    if zc is not None and zc.handoffs and instance is not None and not getattr(instance, "is_draft_worker", False):
        mode = (args[0] if args else kwargs["forward_batch"]).forward_mode
        if mode.is_extend() and not mode.is_target_verify():
            pool = instance.req_to_token_pool.mamba_pool
            if getattr(pool, "_smd_zc", None) is zc:
                zc.materialize(pool.mamba_cache)
                STATE.events["zc_materialize_calls"] = STATE.events.get("zc_materialize_calls", 0) + 1
    return wrapped(*args, **kwargs)
