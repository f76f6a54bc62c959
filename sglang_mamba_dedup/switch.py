"""The ``SGLANG_MAMBA_DEDUP`` switch: its values and the mode they select.

The switch is decided once per process, by :mod:`.activation` (:func:`decide`); the report, the pool and
commit patches read that decision through :func:`current_mode` / :func:`strict`. This module imports
nothing of the package, so every layer can read it. :mod:`.activation` re-exports these names.
"""

from __future__ import annotations

import enum
import os

ENV = "SGLANG_MAMBA_DEDUP"
#: The launch flag of ``python -m sglang.launch_server`` / ``sglang serve`` (same as ``ENV=1``).
FLAG = "--enable-mamba-conv-dedup"


class Mode(enum.StrEnum):
    OFF = "off"
    ON = "on"
    STRICT = "strict"


_VALUES = {"": Mode.OFF, "0": Mode.OFF, "off": Mode.OFF, "1": Mode.ON, "on": Mode.ON, "strict": Mode.STRICT}
ACCEPTED = "unset, 0, off, 1, on, strict"


class SwitchError(ValueError):
    """``SGLANG_MAMBA_DEDUP`` holds a value we do not understand."""


def parse_mode(value: str | None) -> Mode:
    if value is None:
        return Mode.OFF
    key = value.strip().lower()
    if key not in _VALUES:
        shown = value if len(value) <= 40 else f"{value[:40]}... ({len(value)} characters)"
        raise SwitchError(f"{ENV}={shown!r} is not understood; accepted values: {ACCEPTED} (the plugin stays off)")
    return _VALUES[key]


def safe_mode(value: str | None) -> Mode:
    try:
        return parse_mode(value)
    except SwitchError:
        return Mode.OFF


_decided: Mode | None = None


def decide(mode: Mode | None) -> None:
    """Record this process's decision (the activation makes it once per process and switch value); every
    later :func:`current_mode` returns it. ``None`` forgets it (tests)."""
    global _decided
    _decided = mode


def current_mode() -> Mode:
    """The activation's decision for this process, or (before any) what the environment says."""
    return _decided if _decided is not None else safe_mode(os.environ.get(ENV))


def current_mode_name() -> str:
    return current_mode().value


def strict() -> bool:
    return current_mode() is Mode.STRICT
