"""What the commands share: one argparse number type, and the plugin switched for a block (``demo``, ``plan``)."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
from collections.abc import Callable, Iterator

from .. import env


def number(
    kind: Callable[[str], float], *, low: float = 0.0, high: float | None = None, inclusive: bool = False
) -> Callable[[str], float]:
    """An argparse ``type=``: a finite ``kind`` (``int`` or ``float``) above ``low`` (or equal to it, with
    ``inclusive``) and below ``high``; anything else is argparse's usage error, which says the bounds."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if value < low or (value == low and not inclusive) or (high is not None and value >= high):
            bound = f">= {low:g}" if inclusive else f"> {low:g}"
            raise argparse.ArgumentTypeError(
                f"must be {bound}" + (f" and < {high:g}" if high is not None else "") + f", got {text!r}"
            )
        return value

    return parse


#: A whole number of at least 1 (slots, requests, draft tokens, TP size).
positive_int = number(int)


@contextlib.contextmanager
def environ(name: str, value: str | None) -> Iterator[None]:
    """The environment variable ``name`` set to ``value`` (None: unset) inside the block, then as it was."""

    def put(text: str | None) -> None:
        if text is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = text

    old = os.environ.get(name)
    put(value)
    try:
        yield
    finally:
        put(old)


@contextlib.contextmanager
def switched(value: str | None) -> Iterator[None]:
    """The plugin switched to ``value`` inside the block, then back to the environment's switch. A what-if
    (``demo``, ``plan``): no status report file is written and no negative-control fault is installed, whatever
    ``SGLANG_MAMBA_DEDUP_REPORT_DIR`` and ``SGLANG_MAMBA_DEDUP_FAULT`` say."""
    from .. import activation, installed, report
    from ..state import STATE

    # the activation as it was (audit m-S4): a what-if in a process where apply() or the switch had patched
    # must leave exactly that behind -- its features, its mode, its key -- not what the environment would say
    kept = (STATE.mode, STATE.activation_key, STATE.programmatic, STATE.last_summary)
    features = sorted({v["feature"] for v in installed.status().values() if v["state"] == "applied"})
    with report.muted():
        try:
            with environ(env.SWITCH, value):
                activation.register(what_if=True)
                yield
        finally:
            installed.revert()  # the commit stays while a back-ported pool of the what-if is alive
            again = installed.apply(features) if features else {}
            if again.get("launch_flag"):  # accepted on a release outside the range, as the activation does it
                installed.apply(["launch_flag"], any_release=True)
            STATE.mode, STATE.activation_key, STATE.programmatic, STATE.last_summary = kept


@contextlib.contextmanager
def sglang_warnings_quiet() -> Iterator[None]:
    """Within: the warnings SGLang's own modules raise while they import on a machine they were not built for
    (e.g. "Only CUDA, HIP and XPU support AWQ currently", "Triton is not supported on current platform") are not
    printed (N5 of the 2026-12-04 newcomer audit: they fell between ``demo``'s header and its table). Only
    warnings raised from inside the ``sglang`` package; the plugin's own and every other package's still show."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module=r"sglang(\.|$)")
        yield
