"""The state of one ``sglang-mamba-dedup e2e`` call (:class:`RunContext`) and of each of its runs (:class:`RunResult`).

``args`` holds the user's options as argparse parsed them, nothing else; what the call decides and learns on the
way lives in the fields of :class:`RunContext`, which the JSON summary and the output lines read. It imports
nothing of the package, so every e2e module can take one.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class RunContext:
    """One e2e call: the user's options (``args``) and the state the driver derives from them."""

    args: argparse.Namespace
    # set when the call starts (driver.run)
    t_start: float = 0.0  # time.monotonic() before the options were parsed; --time-budget counts from it
    modes: list[str] = dataclasses.field(default_factory=list)  # the planned runs, in order (--modes, off,on)
    batch1_tokens: int = 256  # --batch1-tokens: new tokens of the batch-1 request of --throughput
    prompt_format: str = "auto"  # --prompt-format; "auto" becomes "text" for servers the user runs
    no_reports: bool = False  # servers the user runs: their status reports are not readable
    pair_counts: dict[str, int] = dataclasses.field(default_factory=dict)  # --throughput: timed pairs per phase
    # set while preparing (driver._prepare)
    num_prompts_effective: int | None = None  # the prompts in use
    dropped_defaults: list[str] = dataclasses.field(default_factory=list)  # defaults this SGLang has no field for
    server_dropped: list[str] = dataclasses.field(default_factory=list)  # options this launch_server does not know
    track_expected: bool = False  # the "on" run must show commits with track slots through our kernel
    track_reason: str = ""  # why (or why not)
    workload: dict[str, str] = dataclasses.field(default_factory=dict)  # md5 per part of the run spec
    zero_copy_radix: bool = False  # --zero-copy with the radix cache on (served by default: no variable)
    # set while running
    not_started: list[str] = dataclasses.field(default_factory=list)  # the runs --time-budget left out
    not_written: list[str] = dataclasses.field(default_factory=list)  # results promised (--json-out ...) not written
    temp_workdir: Path | None = None  # the workdir when the call made a temporary one: removed after a PASS
    workdir_kept: bool = False  # the verdict kept the temporary workdir, for its logs


#: The keys of a run's entry in the JSON summary, in order (``throwaway`` is always False: the separate-run
#: throughput schedule that had throwaway runs is gone, the key stays for the readers of the summary).
SUMMARY_KEYS = (
    "mode",
    "throwaway",
    "ok",
    "pid",
    "returncode",
    "error",
    "wall_seconds",
    "stats",
    "report_problems",
    "server_state",
)


@dataclasses.dataclass
class RunResult:
    """One run (an engine process, a server, or one of the two servers of ``--throughput``) as the driver keeps it:
    what its runner answered, where its log and reports are, and its reports as read afterwards."""

    mode: str
    ok: bool = False
    pid: int | None = None
    error: str | None = None
    returncode: Any = None  # the process's exit status, "timeout", or None (a server you run)
    wall_seconds: float | None = None
    log: str | None = None  # None: a server never started
    report_dir: str | None = None
    reports: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # its status reports (reports.py)
    report_problems: list[str] = dataclasses.field(default_factory=list)  # the report files that were unreadable
    stats: dict[str, Any] | None = None  # stats.run_stats of a run that went through (md5 route)
    rounds: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # workload.run_plan's rounds
    versions: dict[str, Any] | None = None  # the engine's environment, as the run reported it
    gpu: dict[str, Any] | None = None
    command: list[str] = dataclasses.field(default_factory=list)  # a server's command line
    plugin_log_lines: list[str] = dataclasses.field(default_factory=list)  # the plugin's lines in a server's log
    server_state: list[Any] | None = None  # each scheduler's ``mamba_dedup`` entry read back after the workload

    @classmethod
    def of(cls, mode: str, answer: dict[str, Any], **fields: Any) -> RunResult:
        """The result of a runner's answer (:data:`.engine.Runner`); ``fields`` set the rest."""
        got = {
            "ok": bool(answer.get("ok")),
            "pid": answer.get("pid"),
            "error": answer.get("error"),
            "returncode": answer.get("returncode"),
            "wall_seconds": answer.get("wall_seconds"),
            "rounds": answer.get("rounds") or [],
            "versions": answer.get("versions"),
            "gpu": answer.get("gpu"),
            "command": answer.get("command") or [],
            "plugin_log_lines": answer.get("plugin_log_lines") or [],
            "server_state": answer.get("server_state"),
        }
        return cls(mode=mode, **{**got, **fields})

    def summary(self) -> dict[str, Any]:
        """Its entry in the JSON summary (:data:`SUMMARY_KEYS`)."""
        return {k: False if k == "throwaway" else getattr(self, k) for k in SUMMARY_KEYS}
