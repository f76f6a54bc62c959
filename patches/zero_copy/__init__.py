"""The zero-copy commit (opt-in: :data:`~sglang_mamba_dedup.env.ZERO_COPY`; SGLang 0.5.23; GDN and Mamba2 with
SGLang's Triton verify kernels), in one place. A request's live SSM state stays in the scratch column where its last
verify wrote the accepted step, the next verify reads it there, and the commit moves only the conv window. Design,
every other reader of the state, and why each excluded case keeps today's commit: docs/zero-copy.md.

* this module: whether zero-copy is asked for on this release (:func:`asked`, the one answer) and the pool's
  ``accepted`` table (:func:`prepare`, at pool build): the only part a process that did not ask for it loads;
* :mod:`.eligibility`: whether a pool may take it (SGLang's resolved settings, the backend), decided once per pool;
* :mod:`.bookkeeping`: :class:`~.bookkeeping.ZeroCopy`, one pool's table and what moves state: the verify's rows and
  seeds (one launch per verify forward), the stage-in (one launch per extend), the commit (one launch, the
  ``accepted`` update folded in), the session hand-off;
* :mod:`.hooks`: the wrappers Z1-Z4 and Z6 of the patch table; Z5 is the commit wrapper's zero-copy route
  (:mod:`..commit` calls :meth:`~.bookkeeping.ZeroCopy.commit`). Every decision and table is the pool's
  (:class:`~sglang_mamba_dedup.state.PoolState`); each hook finds its pool from the object it wraps
  (:func:`pool_of`).
"""

from __future__ import annotations

import os
from typing import Any

from sglang_mamba_dedup import env, state, versions

#: bytes of one entry of the ``accepted`` table (int32, one per scratch row: rows + 1 padding row)
ACCEPTED_ENTRY_BYTES = 4


#: the values of :data:`~sglang_mamba_dedup.env.ZERO_COPY` that say "no" (any other value than these and the "yes"
#: values of :func:`~sglang_mamba_dedup.env.enabled` is reported, never guessed)
_NO = ("", "0", "off", "false", "no")


def wanted() -> bool:
    """The operator asked for zero-copy (the variable, which the launch flag sets), whatever the release."""
    return env.enabled(env.ZERO_COPY)


def _not_understood(name: str) -> str | None:
    """The boolean variable ``name`` holds a value that is neither yes nor no: the one line that says so, or None."""
    raw = os.environ.get(name)
    if raw is None or env.enabled(name) or raw.strip().lower() in _NO:
        return None
    return f"{name}={env.shown(raw)!r} is not understood; accepted values: 1, on, true, yes / 0, off, false, no"


def value_problem() -> str | None:
    """The variable holds a value that is neither yes nor no: what to tell the operator (zero-copy stays off)."""
    return _not_understood(env.ZERO_COPY)


def radix_wanted() -> bool:
    """Zero-copy may serve with the radix cache on: :data:`~sglang_mamba_dedup.env.ZERO_COPY_RADIX` unset, empty or a
    yes value (proven end to end on GDN and Mamba2, docs/e2e.md); a no value is the operator's opt-out, a value not
    understood keeps it off too (:func:`radix_value_problem` says so)."""
    return os.environ.get(env.ZERO_COPY_RADIX, "").strip() == "" or env.enabled(env.ZERO_COPY_RADIX)


def radix_value_problem() -> str | None:
    """:data:`~sglang_mamba_dedup.env.ZERO_COPY_RADIX` holds a value that is neither yes nor no: the one line that
    says so (the radix cache on then keeps today's commit), or None."""
    return _not_understood(env.ZERO_COPY_RADIX)


def radix_said() -> str:
    """Whether zero-copy serves with the radix cache on, in words (the activation line and ``doctor``)."""
    problem = radix_value_problem()
    if problem:
        return f"with the radix cache on: off ({problem})"
    if radix_wanted():
        return (
            "with the radix cache on: served (mamba strategy extra_buffer or extra_buffer_lazy only; "
            f"{env.ZERO_COPY_RADIX}=0 keeps it off there)"
        )
    return f"with the radix cache on: off ({radix_opt_out()}: the operator's opt-out)"


def radix_opt_out() -> str:
    """The opt-out as set, ``NAME='value'`` (the gate's line and :func:`radix_said`)."""
    return f"{env.ZERO_COPY_RADIX}={env.shown(os.environ.get(env.ZERO_COPY_RADIX, ''))!r}"


def release_ok(version: str | None = None) -> bool:
    """Zero-copy is built for this SGLang release exactly (``version``: the installed one when None). Never the
    release :func:`~sglang_mamba_dedup.versions.effective` maps an untested one to: zero-copy depends on private code
    proven on this release only, so ``SGLANG_MAMBA_DEDUP_ALLOW_UNTESTED`` does not extend it."""
    return versions.release(version or versions.sglang_version()).zero_copy


def asked(version: str | None = None) -> bool:
    """The one answer to "is zero-copy asked for, on a release that has it" (``version``: the installed one when
    None), for the activation (which installs its patches), the pool patch (the ``accepted`` table), the estimator
    (which reserves it), the planner, ``doctor`` and the gate of each pool."""
    return wanted() and release_ok(version)


def not_served(version: str | None = None) -> str | None:
    """Why zero-copy is not served although the variable says something: a value that is neither yes nor no, or
    asked for on another release than the one it is built for; None otherwise."""
    problem = value_problem()
    if problem or not wanted() or asked(version):
        return problem
    return (
        f"{env.ZERO_COPY} asked for, but the zero-copy commit is built for SGLang {versions.ZERO_COPY_RELEASE} only "
        f"(this is {version or versions.sglang_version()})"
    )


def pool_of(obj: Any) -> Any:
    """The SGLang mamba pool a hooked object works on, or None: the one place that knows the ways there. A
    linear-attention backend or a model runner holds its request-to-token pool (``obj.req_to_token_pool``); a
    streaming session, or a radix-cache component (``MambaComponent``), its radix cache (``obj.cache``), which holds
    it; a request-to-token pool is its own. The mamba pool is that pool's ``mamba_pool``."""
    rtp = getattr(obj, "req_to_token_pool", None)
    if rtp is None:
        rtp = getattr(getattr(obj, "cache", None), "req_to_token_pool", None)
    return getattr(obj if rtp is None else rtp, "mamba_pool", None)


def prepare(pool):
    """The pool's ``accepted`` table (its :class:`~sglang_mamba_dedup.state.PoolState` is the one home), all ones,
    made on the first call: at pool build where zero-copy is asked for, so that it is allocated with the pool and
    never inside a CUDA-graph capture (where the gate's decision may come first). None: the pool has no scratch."""
    ps = state.pool_state(pool)
    if ps.accepted is None:
        import torch

        scratch = getattr(getattr(pool, "mamba_cache", None), "intermediate_ssm", None)
        if scratch is not None and scratch.dim() >= 3:
            ps.accepted = torch.ones(scratch.shape[1], dtype=torch.int32, device=scratch.device)
    return ps.accepted
