"""The ``sglang.srt.plugins`` entry point :func:`register`: it reads the switch (:mod:`.env`), records its
decision in :data:`.state.STATE` and applies or reverts the patches; ``--enable-mamba-conv-dedup`` in ``sys.argv``
switches the plugin on for this process and its schedulers (docs/internals.md, "Activation and the launch flag").
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

from . import env, versions
from .env import FLAG, Mode, SwitchError, parse_mode
from .env import SWITCH as ENV
from .state import STATE
from .state import current_mode as current_mode  # re-exported, as ENV, FLAG, Mode, SwitchError and parse_mode

#: Why the rest of the plugin (wrapt, the patch layer) does not import here, or None. Kept, not raised, so that
#: SGLang's loader still gets :func:`register`, which stops a strict launch instead of being logged and skipped.
_load_problem: str | None = None
try:
    from . import installed, report
    from .patches import ASKED_FOR, FEATURES
    from .patches import zero_copy as zero_copy_patch
except Exception as _exc:  # noqa: BLE001 - any import failure: register() says it, strict stops
    _load_problem = f"{type(_exc).__name__}: {_exc}"

logger = logging.getLogger("sglang_mamba_dedup")


class StrictModeError(RuntimeError):
    """Strict mode and the plugin cannot engage; raised to stop the launch."""


def mark_programmatic(on: bool = True) -> None:
    """``sglang_mamba_dedup.apply()`` was called in this process: an unset switch then does not revert it."""
    STATE.programmatic = on


def forget() -> None:
    """Everything was reverted: the mode is off and the next activation decides again, even with the same switch."""
    STATE.mode = Mode.OFF
    STATE.activation_key = None


def last_summary() -> str | None:
    """The log line of the last activation in this process (for tests, the doctor and the e2e report)."""
    return STATE.last_summary


def _say(level: int, msg: str, *, visible: bool = False) -> None:
    """Log the activation line. ``visible``: the user asked for the plugin, so the line must reach them even where
    logging is not configured yet (SGLang loads plugins before it sets up logging; Python's fallback handler
    prints only WARNING and above): then it goes to stderr instead. A logger turned down on purpose is obeyed."""
    STATE.last_summary = msg
    silenced = logger.level > level  # NOTSET (0) unless someone set it
    if level >= logging.WARNING or not visible or silenced or (logger.isEnabledFor(level) and _handled(level)):
        logger.log(level, msg)
    else:
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()


def _handled(level: int) -> bool:
    """Whether a configured handler (not Python's last-resort one) would print a record of ``level``."""
    lg: logging.Logger | None = logger
    while lg is not None:
        if any(h.level <= level for h in lg.handlers):
            return True
        if not lg.propagate:
            return False
        lg = lg.parent  # type: ignore[assignment]
    return False


def register(*, what_if: bool = False) -> None:
    """Entry point of the ``sglang.srt.plugins`` group. Fails open (one log line), except in strict mode: there any
    reason not to engage stops the launch with ``SystemExit``, which SGLang's loader does not catch. ``what_if``:
    write no status report and install no fault (the CLIs ``plan`` and ``demo``, which serve nothing)."""
    try:
        if _load_problem is not None:
            _cannot_load(_load_problem)
            return
        with report.muted() if what_if else contextlib.nullcontext():
            _register(what_if)
    except StrictModeError as exc:
        _stop(str(exc))
    except Exception as exc:  # the loader would swallow it: say it once, keep SGLang's stock path
        what = f"{type(exc).__name__}: {exc}"
        _stand_down()
        if env.switch_mode() is Mode.STRICT:
            _stop(f"the plugin failed inside: {what}")
        _say(logging.ERROR, f"sglang-mamba-dedup failed and stays out of the way: {what}")


def _stop(reason: str) -> NoReturn:
    _say(logging.ERROR, f"sglang-mamba-dedup strict mode: {reason}")
    raise SystemExit(f"sglang-mamba-dedup strict mode ({ENV}=strict): {reason}")


def _stand_down() -> None:
    """After a failure inside: decided off, and nothing of ours left wrapped (as far as reverting works)."""
    STATE.mode = Mode.OFF
    with contextlib.suppress(Exception):
        installed.revert()


def _cannot_load(problem: str) -> None:
    """The plugin's own modules do not import (e.g. wrapt missing): strict stops; asked for, ERROR; else INFO."""
    mode = env.switch_mode()
    if mode is Mode.STRICT:
        raise StrictModeError(f"the plugin cannot load: {problem}")
    asked = mode is Mode.ON or bool(flags_in_argv())
    level = logging.ERROR if asked else logging.INFO
    _say(level, f"sglang-mamba-dedup cannot load and stays out of the way, SGLang's stock path is kept: {problem}")


def _refuse_fault() -> None:
    """Strict mode and the negative control's variable is set: a stale export must not break a real server."""
    name = env.value(env.FAULT)
    if name is not None:
        raise StrictModeError(
            f"{env.FAULT}={env.shown(name)!r} is set: the negative control breaks the plugin's commit on purpose, so every "
            f"accepted state would be wrong; strict mode refuses it (unset it; a negative-control run uses {ENV}=1)"
        )


def _accept_flag(head: str, any_release: bool = False) -> str:
    """The launch flag must never take a launch down: SGLang's parser still learns it, and it does nothing."""
    result = installed.apply(["launch_flag"], any_release=any_release)["launch_flag"]
    return head + (
        f" [{_flags_given()} given, accepted and ignored]" if result is None else f" [{_flags_given()} given]"
    )


def _register(what_if: bool) -> None:
    """Every process runs this once per switch value: decide the mode, choose the features, apply them and say so."""
    version = versions.installed_sglang_version()
    decided = _decide(version, what_if)
    if decided is None:  # off (or nothing new): the branch that decided it has said why
        return
    mode, head = decided
    wanted, skipped = _features_for(version)
    _apply_and_report(version, mode, head, wanted, skipped, what_if)


def _decide(version: str | None, what_if: bool) -> tuple[Mode, str] | None:
    """The mode of this process and the head of its log line, or None where it stays off (said here, with the
    reason). Raises :class:`StrictModeError` where strict mode must stop."""
    raw = os.environ.get(ENV)
    try:
        mode, bad = parse_mode(raw), None
    except SwitchError as exc:
        mode, bad = Mode.OFF, str(exc)
    key = (raw or "", version, what_if)
    if key == STATE.activation_key:
        return None
    STATE.activation_key = key
    STATE.mode = Mode.OFF  # until a branch below decides otherwise
    head = f"sglang-mamba-dedup {versions.plugin_version()} (SGLang {version or 'not installed'}, pid {os.getpid()})"

    # a what-if (plan, demo) runs in a process whose argv may be a pasted launch line: it is not that server (B2)
    flags = () if what_if else flags_in_argv()
    flag = bool(flags)
    problem = versions.support_problem(version)
    # SGLang parses its arguments later; the environment carries the flags to the schedulers (the switch only on a
    # supported release, and only where it says off)
    env.export_flags(flags, switch=problem is None)
    if problem:
        if mode is Mode.STRICT:
            raise StrictModeError(problem)
        if flag:
            head = _accept_flag(head, any_release=True)
        _say(logging.WARNING if mode is Mode.ON or flag else logging.INFO, f"{head}: off, nothing patched: {problem}")
        return None

    if bad is not None:
        installed.revert()
        if flag:
            head = _accept_flag(head)  # the environment variable wins over the flag, and it is not understood
        _say(logging.ERROR, f"{head}: {bad}")
        return None
    if mode is Mode.OFF and flag:  # export_flags has set the switch to 1
        mode = Mode.ON
        STATE.activation_key = (os.environ[ENV], version, what_if)
        head += f" [{_flags_given()} given]"
    untested = versions.untested_note(version)
    if untested:
        head += f" [{untested}]"
    if mode is Mode.OFF:
        _stay_off(head, raw)
        return None
    if mode is Mode.STRICT and not what_if:
        _refuse_fault()
    STATE.mode = mode
    return mode, head


def _stay_off(head: str, raw: str | None) -> None:
    """The switch says off: revert what can be reverted and say what stays (or that nothing is patched)."""
    if STATE.programmatic and raw is None and installed.PATCHER.applied():
        _say(
            logging.INFO,
            f"{head}: {ENV} unset, but sglang_mamba_dedup.apply() was called in this process: "
            f"its patches are kept ({', '.join(installed.PATCHER.applied())})",
            visible=True,
        )
        return
    kept = {n: r for n, r in installed.revert().items() if r}
    if kept:
        _say(
            logging.WARNING,
            f"{head}: off ({ENV}={raw or 'unset'}), but {'; '.join(f'{n} {r}' for n, r in kept.items())}",
        )
        return
    if zero_copy_patch.wanted() or zero_copy_patch.value_problem():
        _say(
            logging.WARNING,
            f"{head}: off ({ENV} unset/0/off), nothing patched; {env.ZERO_COPY} is ignored: the zero-copy commit "
            f"is part of the plugin, switch it on with {ENV}=1 (or {FLAG})",
        )
        return
    _say(logging.INFO, f"{head}: off ({ENV} unset/0/off), nothing patched")


def _features_for(version: str | None) -> tuple[list[str], dict[str, str]]:
    """The features to apply on ``version`` (the table's, zero-copy's only where :func:`zero_copy.asked`), and the
    ones skipped before trying, with why (zero-copy given a value it does not understand, or on another release)."""
    zero_copy, zero_copy_skip = zero_copy_patch.asked(version), zero_copy_patch.not_served(version)
    wanted = [f for f in FEATURES if f not in ASKED_FOR or zero_copy]
    return wanted, ({"zero_copy": f"{zero_copy_skip}: today's commit"} if zero_copy_skip else {})


def _apply_and_report(
    version: str | None, mode: Mode, head: str, wanted: list[str], skipped: dict[str, str], what_if: bool
) -> None:
    """Apply ``wanted`` all-or-nothing per feature; strict mode stops on any skip; one log line says what was
    applied, what this release does not need and what was skipped; then the fault (negative control) and the report."""
    results: dict[str, str | None] = installed.apply(wanted)
    skipped = {**{f: r for f, r in results.items() if r is not None}, **skipped}
    if mode is Mode.STRICT and skipped:
        STATE.mode = Mode.OFF
        installed.revert()
        raise StrictModeError("; ".join(f"{f}: {r}" for f, r in skipped.items()))
    st = installed.status()
    switched = [f for f in wanted if f != "launch_flag"]
    applied = sorted({v["feature"] for v in st.values() if v["state"] == "applied" and v["feature"] in switched})
    idle = sorted(f for f in switched if f not in applied and f not in skipped)
    parts = [f"{head}: {mode.value}, {versions.mode_for(version)} mode", "applied " + (", ".join(applied) or "nothing")]
    if idle:
        parts.append("not needed on this release: " + ", ".join(idle))
    if skipped:
        parts.append("skipped: " + "; ".join(f"{f} ({r})" for f, r in skipped.items()))
    if "zero_copy" in applied:
        parts.append("zero-copy " + zero_copy_patch.radix_said())
    untested = versions.untested_note(version)
    _say(logging.WARNING if skipped or untested else logging.INFO, "; ".join(parts), visible=True)
    if "commit" in applied and not what_if and env.value(env.FAULT):
        from .patches import faults  # the e2e's negative control only: never loaded in a real run

        faults.install_from_env()
    report.write()  # muted for a what-if


def _flags_given() -> str:
    """The plugin's launch flags in ``sys.argv``, as the activation line names them (the one typed, not always
    ``--enable-mamba-conv-dedup``)."""
    return " ".join(flags_in_argv()) or FLAG


def flags_in_argv() -> tuple[str, ...]:
    """The plugin's launch flags in this process's ``sys.argv`` (:data:`FLAG`, then the zero-copy one); a question
    only: :func:`.env.export_flags` puts what they mean in the environment."""
    argv = sys.argv[1:]
    return tuple(f for f in (FLAG, env.ZERO_COPY_FLAG) if f in argv)
