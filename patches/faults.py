"""The negative controls of the end-to-end proof: deliberately broken commits, one table of named faults
(:data:`FAULTS`), one switched on by environment (``SGLANG_MAMBA_DEDUP_FAULT=<name>``, with the plugin on).

Each row names what it breaks, the commit routes it reaches (``fused``: our kernel's commit, ``zero_copy``: the
zero-copy commit), the SGLang releases it applies to, its target and one break function (wrapt's signature). The
rows are :class:`~sglang_mamba_dedup.patcher.Patch` rows, one feature per fault, applied and reverted by a
:class:`~sglang_mamba_dedup.patcher.Patcher` of their own: the features' mechanism (targets resolved and signatures
checked before anything is wrapped, the exact originals put back), kept apart from the serving table so that a real
server's patch status, the README's patch table and ``doctor --patch-table`` never list a fault. A new negative
control is one row and one break function. ``sglang-mamba-dedup doctor --faults`` lists them.

* ``commit_step0`` breaks :meth:`sglang_mamba_dedup.patches.commit._Route.commit`, the one seam every commit our
  kernel serves goes through (the fused and the zero-copy committer alike): every accepted request row copies draft
  step 0 instead of its accepted step; skipped rows (step -1) and the track set stay as they are.
* ``zc_no_stage_in`` breaks :meth:`sglang_mamba_dedup.patches.zero_copy.bookkeeping.ZeroCopy.stage_in`: an extend's
  new state never reaches its request's scratch row, so the first verify after it seeds from stale scratch.
* ``zc_no_track`` and ``track_column_live`` break :meth:`~sglang_mamba_dedup.patches.zero_copy.bookkeeping.ZeroCopy.
  commit` with the radix cache on (docs/zero-copy.md §12.8): the track set is dropped (tree slots stay stale), or its
  rows copy the accepted step instead of the tracked one; only later prefix hits read the difference (a workload
  whose next turns extend whole earlier texts).

With partial acceptance in the workload the outputs must then change: an end-to-end md5 check that still says
"equal" with a fault in place proves nothing (``sglang-mamba-dedup e2e --modes off,on,fault [--fault NAME]``).
``tests/integration/test_negative_control.py`` and ``tests/zero_copy/test_zero_copy_kernels.py`` check, on the CPU,
that each fault reaches what it breaks.

Never set it in a real deployment: the plugin logs a WARNING when a fault is installed, and records it in the
status report (``events.fault``); ``SGLANG_MAMBA_DEDUP=strict`` refuses to start while the variable is set,
``doctor`` names it, and the what-if CLIs (``plan``, ``demo``) never install it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sglang_mamba_dedup import env, report, versions
from sglang_mamba_dedup.patcher import Patch, Patcher

#: The commit routes a fault can reach: our fused kernel's commit, and the zero-copy commit.
ROUTES = ("fused", "zero_copy")

logger = logging.getLogger("sglang_mamba_dedup")


@dataclass(frozen=True)
class Fault:
    """One negative control: ``breaks`` says what goes wrong (the WARNING, ``doctor``, the e2e's lines), ``routes``
    the commit routes it reaches (:data:`ROUTES`), ``releases`` the SGLang releases it applies to, ``target`` the
    ``(module, attribute)`` it wraps (with the parameter names ``params`` checked first) and ``breaks_with`` the
    break function, with wrapt's signature ``(wrapped, instance, args, kwargs)``."""

    name: str
    breaks: str
    routes: tuple[str, ...]
    releases: str
    target: tuple[str, str]
    params: tuple[str, ...]
    breaks_with: Callable[..., Any]

    @property
    def patch(self) -> Patch:
        module, attr = self.target
        return Patch(
            name=self.name,
            feature=self.name,
            module=module,
            attr=attr,
            releases=self.releases,
            wrapper=self.breaks_with,
            params=self.params,
            doc=self.breaks,
        )


def _route_commit_args(accept, track, rows):
    return accept, track, rows


def _commit_step0(wrapped, instance, args, kwargs):
    """``_Route.commit`` with every accepted row's step replaced by 0 (a skipped row, step -1, stays skipped)."""
    import torch

    (steps, slots), track, rows = _route_commit_args(*args, **kwargs)
    return wrapped((torch.where(steps >= 0, torch.zeros_like(steps), steps), slots), track, rows)


def _no_stage_in(wrapped, instance, args, kwargs):
    """``ZeroCopy.stage_in`` that does nothing."""
    return None


def _zc_commit_args(cache, accept, track, rows):
    return cache, accept, track, rows


def _no_track(wrapped, instance, args, kwargs):
    """``ZeroCopy.commit`` without its track set (the accept rows as usual)."""
    cache, accept, _track, rows = _zc_commit_args(*args, **kwargs)
    return wrapped(cache, accept, None, rows)


def _track_column_live(wrapped, instance, args, kwargs):
    """``ZeroCopy.commit`` whose tracked rows copy the accepted step instead of the tracked one."""
    import torch

    cache, accept, track, rows = _zc_commit_args(*args, **kwargs)
    if track is not None:
        steps, slots = track
        n = min(steps.shape[0], accept[0].shape[0])
        live = torch.where(steps[:n] >= 0, accept[0][:n].to(steps.dtype), steps[:n])
        track = (torch.cat([live, steps[n:]]) if steps.shape[0] > n else live, slots)
    return wrapped(cache, accept, track, rows)


_COMMIT = f"{__package__}.commit"
_ZERO_COPY = f"{__package__}.zero_copy.bookkeeping"

COMMIT_STEP0 = "commit_step0"
ZC_NO_STAGE_IN = "zc_no_stage_in"
ZC_NO_TRACK = "zc_no_track"
TRACK_COLUMN_LIVE = "track_column_live"
#: The negative controls, by name.
FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault(
            COMMIT_STEP0,
            breaks="the commit copies draft step 0 instead of the accepted step",
            routes=ROUTES,
            releases=str(versions.SUPPORTED),
            target=(_COMMIT, "_Route.commit"),
            params=("accept", "track", "rows"),
            breaks_with=_commit_step0,
        ),
        Fault(
            ZC_NO_STAGE_IN,
            breaks="the zero-copy commit skips the stage-in after an extend (the first verify seeds stale scratch)",
            routes=("zero_copy",),
            releases=str(versions.ZERO_COPY),
            target=(_ZERO_COPY, "ZeroCopy.stage_in"),
            params=("cache", "slots", "rows"),
            breaks_with=_no_stage_in,
        ),
        Fault(
            ZC_NO_TRACK,
            breaks="the zero-copy commit drops its track set (the radix cache on: tree states stay stale)",
            routes=("zero_copy",),
            releases=str(versions.ZERO_COPY),
            target=(_ZERO_COPY, "ZeroCopy.commit"),
            params=("cache", "accept", "track", "rows"),
            breaks_with=_no_track,
        ),
        Fault(
            TRACK_COLUMN_LIVE,
            breaks="the zero-copy commit tracks the accepted step instead of the tracked one (the radix cache on)",
            routes=("zero_copy",),
            releases=str(versions.ZERO_COPY),
            target=(_ZERO_COPY, "ZeroCopy.commit"),
            params=("cache", "accept", "track", "rows"),
            breaks_with=_track_column_live,
        ),
    )
}

#: Applies and reverts the faults (one feature each), apart from the serving table's patcher.
PATCHER = Patcher(f.patch for f in FAULTS.values())


def installed() -> str | None:
    """The fault in place in this process (what the patcher has wrapped), or None."""
    applied = PATCHER.applied()
    return applied[0] if applied else None


def install(name: str) -> None:
    """Break the plugin's commit as the fault ``name`` says (idempotent; another fault in place is removed first).
    ``ValueError`` with one line for an unknown name or a fault that cannot be installed here (another release, a
    target that changed); nothing is then wrapped."""
    fault = FAULTS.get(name)
    if fault is None:
        raise ValueError(f"{env.FAULT}={env.shown(name)!r} is not a known fault; known: {', '.join(FAULTS)}")
    if installed() == name:
        return
    remove()
    problem = PATCHER.apply([name])[name]
    if problem is None and not PATCHER.applied(name):
        problem = f"it applies to SGLang {fault.releases} only (this is {versions.installed_sglang_version()})"
    if problem is not None:
        raise ValueError(f"{env.FAULT}={name}: the fault cannot be installed: {problem}")
    report.record_fault(name)
    logger.warning(
        "sglang-mamba-dedup: NEGATIVE CONTROL %s=%s: %s (never in a real run)", env.FAULT, name, fault.breaks
    )


def remove() -> None:
    """Undo :func:`install` (no-op when no fault is in place)."""
    PATCHER.revert()
    report.record_fault(None)


def set_env(child: dict[str, str], on: bool, name: str = COMMIT_STEP0) -> dict[str, str]:
    """Set (``on``: the e2e's ``fault`` runs) or clear the fault's variable in a child's environment."""
    if on:
        child[env.FAULT] = name
    else:
        child.pop(env.FAULT, None)
    return child


def requested() -> str | None:
    """The value of :data:`env.FAULT` (stripped), a known fault or not; None when unset or blank."""
    return env.value(env.FAULT)


def install_from_env() -> str | None:
    """Install the fault named by :data:`env.FAULT` (called by the activation when the plugin is on); returns its
    name, or None when unset. An unknown name, or a fault that cannot be installed, is logged at ERROR (one line)
    and nothing is installed."""
    name = requested()
    if name is None:
        return None
    try:
        install(name)
    except ValueError as exc:
        logger.error("sglang-mamba-dedup: %s; no fault installed", exc)
        return None
    return name
