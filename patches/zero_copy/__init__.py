"""The zero-copy commit (opt-in: :data:`~sglang_mamba_dedup.env.ZERO_COPY`; SGLang 0.5.23; GDN and Mamba2 with
SGLang's Triton verify kernels), in one place. A request's live SSM state stays in the scratch column where its last
verify wrote the accepted step, the next verify reads it there, and the commit moves only the conv window. Design,
every other reader of the state, and why each excluded case keeps today's commit: docs/zero-copy.md.

* this module: whether zero-copy is asked for (:func:`asked`) and the pool's ``accepted`` table (:func:`prepare`, at
  pool build): the only part a process that did not ask for zero-copy loads;
* :mod:`.eligibility`: whether a pool may take it (SGLang's resolved settings, the backend), decided once per pool;
* :mod:`.bookkeeping`: :class:`~.bookkeeping.ZeroCopy`, one pool's table and what moves state: the verify's rows and
  seeds (one launch per verify forward), the stage-in (one launch per extend), the commit (one launch, the
  ``accepted`` update folded in), the session hand-off;
* :mod:`.hooks`: the wrappers Z1-Z4 and Z6 of the patch table; Z5 is the commit wrapper's zero-copy route
  (:mod:`..commit` calls :meth:`~.bookkeeping.ZeroCopy.commit`).
"""

from __future__ import annotations

import os

from sglang_mamba_dedup import env, state, versions

#: bytes of one entry of the ``accepted`` table (int32, one per scratch row: rows + 1 padding row)
ACCEPTED_ENTRY_BYTES = 4


#: the values of :data:`~sglang_mamba_dedup.env.ZERO_COPY` that say "no" (any other value than these and the "yes"
#: values of :func:`~sglang_mamba_dedup.env.enabled` is reported, never guessed)
_NO = ("", "0", "off", "false", "no")


def wanted() -> bool:
    """The operator asked for zero-copy (the variable, which the launch flag sets), whatever the release."""
    return env.enabled(env.ZERO_COPY)


def value_problem() -> str | None:
    """The variable holds a value that is neither yes nor no: what to tell the operator (zero-copy stays off)."""
    raw = os.environ.get(env.ZERO_COPY)
    if raw is None or wanted() or raw.strip().lower() in _NO:
        return None
    return f"{env.ZERO_COPY}={raw[:40]!r} is not understood; accepted values: 1, on, true, yes / 0, off, false, no"


def release_ok(version: str | None = None) -> bool:
    """Zero-copy is built for this SGLang release exactly (``version``: the installed one when None). Never the
    release :func:`~sglang_mamba_dedup.versions.effective` maps an untested one to: zero-copy depends on private code
    proven on this release only, so ``SGLANG_MAMBA_DEDUP_ALLOW_UNTESTED`` does not extend it."""
    return versions.release(version or versions.sglang_version()).zero_copy


def asked() -> bool:
    """Zero-copy is asked for on a release that has it: the pool is then built with its ``accepted`` table (the pool
    patch) and the estimator reserves it."""
    return wanted() and release_ok()


def prepare(pool) -> None:
    """At pool build (zero-copy asked for): the ``accepted`` table, all ones, so that it is allocated with the pool and
    never inside a CUDA-graph capture (where the decision may come first)."""
    import torch

    scratch = getattr(getattr(pool, "mamba_cache", None), "intermediate_ssm", None)
    if scratch is not None and scratch.dim() >= 3:
        state.pool_state(pool).accepted = torch.ones(scratch.shape[1], dtype=torch.int32, device=scratch.device)
