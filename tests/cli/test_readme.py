"""The README's ``plan`` example runs as written and prints what the README shows (N3, N4 of the 2026-12-04
newcomer audit: its example needed a checkpoint the reader does not have, and its sample output could not be
reproduced). The numbers are SGLang 0.5.23's: other releases skip."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from sglang_mamba_dedup import versions
from sglang_mamba_dedup.planner import plan

ROOT = Path(__file__).resolve().parents[2]


def _example() -> tuple[list[str], list[str]]:
    """The first ``console`` block of the README that runs ``plan``: its command's arguments and the lines shown."""
    for block in re.findall(r"```console\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S):
        lines = block.splitlines()
        if lines and lines[0].startswith("$ sglang-mamba-dedup plan"):
            command = []
            while lines:
                line = lines.pop(0)
                command.append(line.removeprefix("$ ").removesuffix("\\"))
                if not line.endswith("\\"):
                    break
            return shlex.split(" ".join(command))[2:], lines
    raise AssertionError("the README has no console block running sglang-mamba-dedup plan")


def test_the_readme_plan_example_prints_what_the_readme_shows(capsys):
    if versions.installed_sglang_version() != "0.5.23":
        pytest.skip("the README's sample output is SGLang 0.5.23's")
    argv, shown = _example()
    assert "--shape" in argv, "the example must run without a checkpoint"
    assert plan.main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    for line in shown:
        if line == "..." or not line.strip():
            continue
        if line.endswith("..."):  # a long line the README cuts
            assert any(p.startswith(line[:-3].rstrip()) for p in printed), (line, printed)
        else:
            assert line in printed, (line, printed)
