"""The post-verify commit of accepted SSM states and conv windows (``update_mamba_state_after_mtp_verify``): our
one fused launch (:mod:`sglang_mamba_dedup.kernels.state_commit`), zero-copy's commit, or SGLang's own code for every
branch we do not own, chosen with SGLang's own tests (docs/internals.md). Each backend's route binds its committer
once, when its pool first commits, and never switches afterwards; the wrapper counts what came back, under one lock.
No host sync: no ``.item()``, no ``nonzero``.
"""

from __future__ import annotations

import logging
import sys

from sglang_mamba_dedup import kernels, report, state
from sglang_mamba_dedup.env import SWITCH
from sglang_mamba_dedup.patcher import Callee, self_first
from sglang_mamba_dedup.state import STATE

_BACKEND = "sglang.srt.layers.attention.hybrid_linear_attn_backend"
#: What our path calls in SGLang (signatures checked before wrapping). PLE side states: absent before 0.5.20;
#: 4 arguments, to which 0.5.22+ add ``src_indices_raw=None`` (set only for pipeline stable rows, SGLang's path).
CALLEES = (
    Callee(_BACKEND, "HybridLinearAttnBackend._update_ple_state_after_mtp_verify", args=4, optional=True),
    Callee(_BACKEND, "MambaAttnBackendBase._translate_mamba_indices", args=1, optional=True),
)

logger = logging.getLogger("sglang_mamba_dedup")


def kernel_problem() -> str | None:
    """Why the fused commit kernel cannot serve in this process, or None: :func:`sglang_mamba_dedup.kernels.load`
    tries its import once per process (asked at pool build and route build, before any committer imports it by
    name). Said once per process at WARNING: SGLang's own commit then serves every call, strict mode refuses the pool."""
    try:
        kernels.load()
    except ImportError as exc:
        state.warn_once(
            "commit kernel import",
            "sglang-mamba-dedup: the fused commit kernel does not import (%s); SGLang's own commit is used for every "
            "verify step in this process",
            exc,
        )
        return str(exc)
    return None


def backport_problem() -> str | None:
    """Why a back-ported pool could not be committed now (SGLang's scatter cannot read its view), or None."""
    if not STATE.commit_installed:
        return "the plugin's commit patch is not active (SGLang's own scatter cannot read a deduplicated view)"
    err = kernel_problem()
    if err:
        return f"the plugin's commit kernel is unavailable: {err}"
    return None


def _bind(
    last_correct_step_indices,
    mamba_track_indices=None,
    mamba_steps_to_track=None,
    model=None,
    req_pool_indices=None,
    *_args,
    **_kwargs,
) -> tuple:
    """SGLang's arguments, however they were passed (``_bind(*args, **kwargs)``)."""
    return last_correct_step_indices, mamba_track_indices, mamba_steps_to_track, req_pool_indices


def fused_committer():
    """The plugin's own committer, bound to a route at its build (after :func:`kernel_problem` found the kernel):
    the accepted (and tracked) step of the SSM state and of every conv kind, one launch. ``rows`` is not read (the
    verify's batch positions are the source rows)."""
    from sglang_mamba_dedup.kernels import descriptor, state_commit  # imported already: kernel_problem() at route build

    def fused_commit(cache, accept, track, rows):
        """``(plan, path)``: the plan launched (looked up on every call: docs/internals.md) and the launch path."""
        plan = descriptor.get_plan(cache.conv, cache.intermediate_conv_window, cache.temporal, cache.intermediate_ssm)
        return plan, state_commit.launch(plan, ssm=(cache.intermediate_ssm, cache.temporal), accept=accept, track=track)

    return fused_commit


def bind_committer(pool_state) -> tuple:
    """``(committer, zero_copy)`` of a route our kernel serves, chosen once, at the route's build (its pool's first
    commit through this backend): the pool's zero-copy commit (:meth:`~sglang_mamba_dedup.patches.zero_copy.bookkeeping.
    ZeroCopy.commit`) where its gate took it (decided once per pool, at its first forward, before any commit), else
    :func:`fused_committer`. Both have one signature, ``commit(cache, accept, track, rows) -> (plan, path)``."""
    zc = pool_state.zero_copy if pool_state is not None else None
    if zc is not None:
        return zc.commit, True
    return fused_committer(), False


class _Route:
    """What one backend's commit decided for its current pool, reused while the backend still has that pool and
    cache (identity checks only). ``reason`` None: our kernel serves the call, through ``committer`` (bound once, at
    build: :func:`bind_committer`; ``zero_copy`` says which); ``pool_state`` is the pool's
    :class:`~sglang_mamba_dedup.state.PoolState`."""

    __slots__ = ("linear_backend", "pool", "cache", "pool_state", "reason", "plan", "committer", "zero_copy")

    def __init__(self, linear_backend, pool, cache, reason):
        self.linear_backend, self.pool, self.cache, self.reason = linear_backend, pool, cache, reason
        self.pool_state = state.pool_state_of(pool)
        self.plan = None
        self.committer, self.zero_copy = (None, False) if reason is not None else bind_committer(self.pool_state)

    def still_valid(self, linear_backend) -> bool:
        return (
            linear_backend is self.linear_backend
            and linear_backend.req_to_token_pool.mamba_pool is self.pool
            and self.pool.mamba_cache is self.cache
        )

    def commit(self, accept, track, rows) -> str | None:
        """The route's committer on ``accept`` = ``(steps, slots)``, ``track`` (the same pair, or None: no track set)
        and ``rows`` (SGLang's ``req_pool_indices``, or None); returns the launch path for the wrapper to count. The
        seam the negative control breaks (:mod:`.faults`); the route keeps the plan in use alive for CUDA graphs."""
        self.plan, path = self.committer(self.cache, accept, track, rows)
        return path


def _static_reason(linear_backend, pool) -> str | None:
    """The branches SGLang keeps that depend only on the backend and its pool (fixed once built)."""
    ps = state.pool_state_of(pool)
    if ps is None or not ps.commit_ok:
        return "pool not cleared for the plugin's commit"
    if getattr(pool, "replayssm_is_kda", False):
        return "ReplaySSM-KDA"
    if getattr(linear_backend, "accept_lens_pool", None) is not None:
        return "KDA fused accept"
    cache = pool.mamba_cache
    if getattr(cache, "intermediate_ssm", None) is None:
        return "ReplaySSM spec (no intermediate_ssm)"
    if cache.temporal.numel() == 0 or any(c.numel() == 0 for c in cache.conv):
        return "empty state"
    if kernel_problem() is not None:
        return "kernel unavailable"
    return None


def _route(instance) -> _Route:
    """This backend's cached route (rebuilt when its pool or state tensors changed)."""
    linear_backend = getattr(instance, "linear_attn_backend", None)
    route = getattr(instance, "_smd_route", None)
    try:
        if route is not None and route.still_valid(linear_backend):
            return route
    except AttributeError:
        pass
    pool = getattr(getattr(linear_backend, "req_to_token_pool", None), "mamba_pool", None)
    cache = getattr(pool, "mamba_cache", None)
    route = _Route(linear_backend, pool, cache, _static_reason(linear_backend, pool))
    if pool is not None and cache is not None:
        try:
            instance._smd_route = route
        except AttributeError:  # a backend with __slots__: decide per call
            pass
    return route


def _serving_route(instance, wrapped, req_pool_indices) -> _Route | None:
    """This backend's route when our kernel may serve this call; None for a branch SGLang keeps."""
    route = _route(instance)
    if route.reason is not None:
        return None
    if req_pool_indices is not None:
        module = sys.modules.get(getattr(wrapped, "__module__", ""), None)
        stable = getattr(module, "pp_spec_stable_rows_enabled", None)
        if stable is not None and stable():
            return None
    return route


def update_mamba_state_after_mtp_verify(wrapped, instance, args, kwargs):
    _, instance, call_args, _ = self_first(
        wrapped, instance, args, lambda o: hasattr(o, "linear_attn_backend"), what="the verify commit"
    )
    try:
        last_correct, track_idx, track_steps, req_pool_indices = _bind(*call_args, **kwargs)
    except TypeError:  # a call form without SGLang's first argument: SGLang's own code says what is wrong
        report.count_commit(ours=False)
        return wrapped(*args, **kwargs)
    if instance is None and state.is_strict():
        raise RuntimeError(
            f"sglang-mamba-dedup strict mode ({SWITCH}=strict): the verify commit was called in a "
            "form the plugin cannot read (no backend instance)"
        )
    route = None if instance is None else _serving_route(instance, wrapped, req_pool_indices)
    if route is None:
        report.count_commit(ours=False, track=track_idx is not None)
        return wrapped(*args, **kwargs)

    linear_backend = route.linear_backend
    n = last_correct.shape[0]
    slots = linear_backend.forward_metadata.mamba_cache_indices
    state_indices = slots if slots.shape[0] == n else slots[:n]  # SGLang's [:n], without a new view when equal
    if track_idx is not None:
        assert track_steps is not None
        translate = getattr(linear_backend, "_translate_mamba_indices", None)  # 0.5.23: virtual -> physical slot ids
        if translate is not None:
            track_idx = translate(track_idx)
    track = None if track_idx is None else (track_steps, track_idx)
    path = route.commit((last_correct, state_indices), track, req_pool_indices)
    ple = getattr(instance, "_update_ple_state_after_mtp_verify", None)
    if ple is not None:
        ple(state_indices, last_correct, track_idx, track_steps)  # the call checked by CALLEES
    report.count_commit(ours=True, track=track is not None, zero_copy=route.zero_copy, path=path)
    return None
