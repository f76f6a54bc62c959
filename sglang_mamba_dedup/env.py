"""Every environment variable and launch flag the plugin reads, with what each means (one home for the names).

Boolean variables (:func:`enabled`) accept ``1``, ``on``, ``true``, ``yes`` (any case); anything else is off.
"""

from __future__ import annotations

import enum
import os

SWITCH = "SGLANG_MAMBA_DEDUP"
"""The switch: unset / ``0`` / ``off`` = off; ``1`` / ``on`` = on (a reason to skip is logged and SGLang's
stock path kept); ``strict`` = on, and any reason to skip stops the launch. Spawned SGLang processes inherit it."""

FLAG = "--enable-mamba-conv-dedup"
"""The launch flag of ``python -m sglang.launch_server`` / ``sglang serve``: the same as ``SGLANG_MAMBA_DEDUP=1``."""

ZERO_COPY = "SGLANG_MAMBA_DEDUP_ZERO_COPY"
"""Boolean, with the switch on: the zero-copy commit (SGLang 0.5.23, GDN, the cases docs/zero-copy.md makes safe):
the verify seeds each request from the scratch column its last verify wrote, and the commit moves no SSM bytes."""

ZERO_COPY_RADIX = "SGLANG_MAMBA_DEDUP_ZERO_COPY_RADIX"
"""Boolean, on unless set to a no value: with :data:`ZERO_COPY`, zero-copy also serves with the radix cache on
(docs/zero-copy.md §12; the mamba strategy ``extra_buffer`` or ``extra_buffer_lazy``), proven end to end on GDN and
Mamba2 (docs/e2e.md). ``0`` keeps the radix cache on today's commit (zero-copy then serves radix-off launches only); a
value neither yes nor no does the same, named in the gate's line. No effect without :data:`ZERO_COPY`."""

ZERO_COPY_FLAG = "--enable-mamba-zero-copy-commit"
"""The launch flag for :data:`ZERO_COPY` (it also switches the plugin on, like :data:`FLAG`)."""

FAULT = "SGLANG_MAMBA_DEDUP_FAULT"
"""The e2e's negative control (``commit_step0``: the commit copies draft step 0; ``zc_no_stage_in``: zero-copy's
stage-in after an extend is skipped; with the radix cache on, ``zc_no_track``: zero-copy's commit drops its track set,
``track_column_live``: it tracks the accepted step); strict mode refuses to start."""

REPORT_DIR = "SGLANG_MAMBA_DEDUP_REPORT_DIR"
"""A folder: each process writes ``status-<pid>-<token>.json`` there (what was patched, layouts, commit counts)."""

ALLOW_CPU = "SGLANG_MAMBA_DEDUP_ALLOW_CPU"
"""Tests only (boolean): the pool gate accepts a CPU pool, where the Triton interpreter stands in for the GPU."""

ALLOW_UNTESTED = "SGLANG_MAMBA_DEDUP_ALLOW_UNTESTED"
"""Boolean: patch an SGLang release newer than the tested range as the newest tested one (logged UNTESTED)."""


class Mode(enum.StrEnum):
    """What the switch selects."""

    OFF = "off"
    ON = "on"
    STRICT = "strict"


_VALUES = {"": Mode.OFF, "0": Mode.OFF, "off": Mode.OFF, "1": Mode.ON, "on": Mode.ON, "strict": Mode.STRICT}
#: the switch's values :func:`parse_mode` understands, as its error names them
SWITCH_VALUES = "unset, 0, off, 1, on, strict"


class SwitchError(ValueError):
    """``SGLANG_MAMBA_DEDUP`` holds a value we do not understand."""


def shown(value: str, limit: int = 40) -> str:
    """``value`` as a message or a report echoes it: cut to ``limit`` characters, with its length, when longer."""
    return value if len(value) <= limit else f"{value[:limit]}... ({len(value)} characters)"


def parse_mode(value: str | None) -> Mode:
    """The mode a switch value selects; :class:`SwitchError` (naming the accepted values) for anything else."""
    if value is None:
        return Mode.OFF
    key = value.strip().lower()
    if key not in _VALUES:
        raise SwitchError(
            f"{SWITCH}={shown(value)!r} is not understood; accepted values: {SWITCH_VALUES} (the plugin stays off)"
        )
    return _VALUES[key]


def parse_mode_or_off(value: str | None) -> Mode:
    """:func:`parse_mode`, with a value it does not understand read as off."""
    try:
        return parse_mode(value)
    except SwitchError:
        return Mode.OFF


def switch_mode() -> Mode:
    """What the environment's switch says now (unparseable: off)."""
    return parse_mode_or_off(os.environ.get(SWITCH))


def enabled(name: str) -> bool:
    """A boolean variable: ``1`` / ``on`` / ``true`` / ``yes``."""
    return os.environ.get(name, "").strip().lower() in ("1", "on", "true", "yes")


def export_flags(flags: tuple[str, ...], *, switch: bool = True) -> str | None:
    """What the plugin's launch ``flags`` mean, put in the environment the scheduler processes inherit: the one
    translation, for the activation (``sys.argv``) and for SGLang's ``from_cli_args`` (a caller that built its own
    argument list). :data:`ZERO_COPY_FLAG` sets :data:`ZERO_COPY` to 1; either flag, with ``switch``, sets
    :data:`SWITCH` to 1 where it says off (unset, 0, off), never over on or strict, nor over a value not understood
    (which keeps the plugin off in every process, as the activation said). Returns the value of :data:`SWITCH` the
    flag replaced (``""`` when unset), or None where it left the switch alone."""
    if ZERO_COPY_FLAG in flags:
        os.environ[ZERO_COPY] = "1"
    if not switch or not flags:
        return None
    current = os.environ.get(SWITCH, "")
    try:
        if parse_mode(current) is not Mode.OFF:
            return None
    except SwitchError:
        return None
    os.environ[SWITCH] = "1"
    return current


def value(name: str) -> str | None:
    """A variable's value, stripped; None when unset or blank."""
    return os.environ.get(name, "").strip() or None
