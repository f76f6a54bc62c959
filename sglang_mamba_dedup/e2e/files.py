"""Files the e2e writes (``--json-out``, ``--csv-out``, the run and server logs): never through a symbolic link.

A link planted at one of these paths (in a shared ``--workdir``, say) would otherwise have its target
overwritten; :func:`open_for_writing` opens with ``O_NOFOLLOW``, so a link there is an ``OSError`` instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def open_for_writing(path: Path | str, newline: str | None = None) -> TextIO:
    """``open(path, "w")`` that refuses a symbolic link at ``path`` (``OSError``, ELOOP) instead of following it."""
    return os.fdopen(os.open(path, _FLAGS, 0o644), "w", newline=newline)


def write_text(path: Path | str, text: str) -> None:
    with open_for_writing(path) as f:
        f.write(text)
