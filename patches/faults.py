"""The negative control of the end-to-end proof: a deliberately broken commit, switched on by environment.

``SGLANG_MAMBA_DEDUP_FAULT=commit_step0`` (together with the plugin switched on) makes the plugin's commit
copy draft step 0 of every accepted request row instead of its accepted step; skipped rows (step -1) and
the track set stay as they are. The fault replaces the method
:meth:`sglang_mamba_dedup.patches.commit._Route.commit`, the one launch the commit wrapper makes
(looked up on the route's class on every call), so it reaches every commit our kernel serves, and
nothing else. With partial acceptance in the workload the outputs must then change: an end-to-end md5
check that still says "equal" with the fault in place proves nothing (``sglang-mamba-dedup e2e --modes
off,on,fault``). ``tests/integration/test_negative_control.py`` checks, on the CPU, that the fault reaches the
kernel through SGLang's real commit call.

Never set it in a real deployment: the plugin logs a WARNING when it is installed, and records it in the
status report (``events.fault``); ``SGLANG_MAMBA_DEDUP=strict`` refuses to start while it is set, ``doctor``
names it, and the what-if CLIs (``plan``, ``demo``) never install it.
"""

from __future__ import annotations

import logging

from sglang_mamba_dedup import env, report
from sglang_mamba_dedup.state import STATE

from . import commit as commit_patch
from .zero_copy import bookkeeping

COMMIT_STEP0 = "commit_step0"
ZC_NO_STAGE_IN = "zc_no_stage_in"
FAULTS: dict[str, str] = {
    COMMIT_STEP0: "the commit copies draft step 0 instead of the accepted step",
    ZC_NO_STAGE_IN: "the zero-copy commit skips the stage-in after an extend (the first verify seeds stale scratch)",
}

logger = logging.getLogger("sglang_mamba_dedup")


def installed() -> str | None:
    """The fault in place in this process, or None."""
    return STATE.fault


def install(name: str) -> None:
    """Break the plugin's commit as ``name`` says (idempotent); ``ValueError`` for an unknown name."""
    if name not in FAULTS:
        raise ValueError(f"{env.FAULT}={name!r} is not a known fault; known: {', '.join(FAULTS)}")
    if STATE.fault == name:
        return
    remove()
    if name == ZC_NO_STAGE_IN:
        real_stage_in = bookkeeping.ZeroCopy.stage_in

        def no_stage_in(zc, cache, slots, rows):
            return None

        no_stage_in._smd_real = real_stage_in  # type: ignore[attr-defined]
        bookkeeping.ZeroCopy.stage_in = no_stage_in  # type: ignore[method-assign]
    else:
        real = commit_patch._Route.commit

        def commit_step0(route, steps, slots, track_steps, track_slots, rows=None):
            import torch

            step0 = torch.where(steps >= 0, torch.zeros_like(steps), steps)
            return real(route, step0, slots, track_steps, track_slots, rows=rows)

        commit_step0._smd_real = real  # type: ignore[attr-defined]
        commit_patch._Route.commit = commit_step0  # type: ignore[method-assign]
    STATE.fault = name
    report.record_fault(name)
    logger.warning(
        "sglang-mamba-dedup: NEGATIVE CONTROL %s=%s: %s (never in a real run)", env.FAULT, name, FAULTS[name]
    )


def remove() -> None:
    """Undo :func:`install` (no-op when no fault is in place)."""
    real = getattr(commit_patch._Route.commit, "_smd_real", None)
    if real is not None:
        commit_patch._Route.commit = real  # type: ignore[method-assign]
    real = getattr(bookkeeping.ZeroCopy.stage_in, "_smd_real", None)
    if real is not None:
        bookkeeping.ZeroCopy.stage_in = real  # type: ignore[method-assign]
    STATE.fault = None
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
    name, or None when unset. An unknown name is logged at ERROR and nothing is installed."""
    name = requested()
    if name is None:
        return None
    try:
        install(name)
    except ValueError as exc:
        logger.error("sglang-mamba-dedup: %s; no fault installed", exc)
        return None
    return name
