"""The state of one ``sglang-mamba-dedup e2e`` call, passed from step to step of the driver.

``args`` holds the user's options as argparse parsed them, nothing else; what the call decides and learns
on the way (the run plan, the effective prompt format and counts, the settings it dropped, the workload's
md5s, the runs merged or not started ...) lives in the fields of :class:`RunContext`, which the JSON summary
and the output lines read. It imports nothing of the package, so every e2e module can take one.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class RunContext:
    """One e2e call: the user's options (``args``) and the state the driver derives from them.

        Set when the call starts (:func:`sglang_mamba_dedup.e2e.driver.run`): ``t_start`` (``time.monotonic()``
        before the options were parsed; ``--time-budget`` counts from it), ``plan`` (the runs as ``(mode,
        throwaway)``), ``batch1_tokens`` (``--batch1-tokens`` or 256), ``prompt_format`` (``--prompt-format``;
        ``auto`` becomes ``text`` for servers the user runs), ``no_reports`` (True for those servers: their
        status reports are not readable), ``pair_counts`` (``--throughput``: timed pairs per phase,
        ``--batch1-pairs`` / ``--full-pairs`` or 30 / 10). Set while preparing: ``num_prompts_effective`` (prompts in use),
        ``dropped_defaults`` / ``server_dropped`` (defaults this SGLang has no field for, options this
        ``launch_server`` does not know), ``track_expected`` / ``track_reason``, ``workload`` (md5 per part of the
        run spec) and ``merged`` (the timed runs of ``--throughput-from``). Set while running: ``not_started``
        (the runs ``--time-budget`` left out), ``temp_workdir`` (the workdir when the call made a temporary one: removed
    after a PASS) and ``workdir_kept`` (the verdict said it is kept, for its logs).
    """

    args: argparse.Namespace
    t_start: float = 0.0
    plan: list[tuple[str, bool]] = dataclasses.field(default_factory=list)
    batch1_tokens: int = 256
    prompt_format: str = "auto"
    no_reports: bool = False
    num_prompts_effective: int | None = None
    dropped_defaults: list[str] = dataclasses.field(default_factory=list)
    server_dropped: list[str] = dataclasses.field(default_factory=list)
    track_expected: bool = False
    track_reason: str = ""
    workload: dict[str, str] = dataclasses.field(default_factory=dict)
    merged: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    not_started: list[str] = dataclasses.field(default_factory=list)
    pair_counts: dict[str, int] = dataclasses.field(default_factory=dict)
    temp_workdir: Path | None = None
    workdir_kept: bool = False

    @property
    def modes(self) -> list[str]:
        """The mode of every planned run, in order."""
        return [m for m, _ in self.plan]
