"""The ``SGLANG_MAMBA_DEDUP`` switch: its values and the mode they select.

Shared by :mod:`.activation` (which acts on the mode) and :mod:`.report` (which records it); it imports
nothing of the package, so neither of them needs the other for it. :mod:`.activation` re-exports these
names, so ``activation.ENV``, ``activation.parse_mode`` ... keep working.
"""

from __future__ import annotations

import enum
import os
from typing import Optional

ENV = "SGLANG_MAMBA_DEDUP"
#: The launch flag of ``python -m sglang.launch_server`` / ``sglang serve`` (same as ``ENV=1``).
FLAG = "--enable-mamba-conv-dedup"


class Mode(str, enum.Enum):
    OFF = "off"
    ON = "on"
    STRICT = "strict"


_VALUES = {"": Mode.OFF, "0": Mode.OFF, "off": Mode.OFF, "1": Mode.ON, "on": Mode.ON, "strict": Mode.STRICT}
ACCEPTED = "unset, 0, off, 1, on, strict"


class SwitchError(ValueError):
    """``SGLANG_MAMBA_DEDUP`` holds a value we do not understand."""


def parse_mode(value: Optional[str]) -> Mode:
    if value is None:
        return Mode.OFF
    key = value.strip().lower()
    if key not in _VALUES:
        shown = value if len(value) <= 40 else f"{value[:40]}... ({len(value)} characters)"
        raise SwitchError(f"{ENV}={shown!r} is not understood; accepted values: {ACCEPTED} (the plugin stays off)")
    return _VALUES[key]


def safe_mode(value: Optional[str]) -> Mode:
    try:
        return parse_mode(value)
    except SwitchError:
        return Mode.OFF


def current_mode() -> Mode:
    return safe_mode(os.environ.get(ENV))


def current_mode_name() -> str:
    return current_mode().value


def strict() -> bool:
    return current_mode() is Mode.STRICT
