"""The project's build backend: setuptools' own (``setuptools.build_meta``), leaving the checkout as it was.

setuptools builds in the source folder: ``pip install .`` leaves ``build/`` and ``sglang_mamba_dedup.egg-info/`` in
the checkout (the 2026-12-04 newcomer audit, N2). Each hook here runs setuptools' own and then removes those of the
two that the hook created (one that was there before keeps what it held; what the build added to it goes). Editable installs (``pip install -e .``) are
setuptools' own, untouched: their metadata lives in the checkout by design.
"""

from __future__ import annotations

import functools
import os
import shutil

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - every hook setuptools has, editable ones included

#: What a setuptools build writes into the source folder.
LEFTOVERS = ("build", "sglang_mamba_dedup.egg-info")


def _entries(path: str) -> set[str] | None:
    """The names in the folder ``path`` (None: no such folder)."""
    return set(os.listdir(path)) if os.path.isdir(path) and not os.path.islink(path) else None


def _tidy(hook):
    @functools.wraps(hook)
    def run(*args, **kwargs):
        before = {path: _entries(path) for path in LEFTOVERS}
        try:
            return hook(*args, **kwargs)
        finally:
            for path, had in before.items():
                now = _entries(path)
                if now is None:
                    continue
                if had is None:  # the build made it
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                for name in now - had:  # a folder of the user's own: only what the build added goes
                    target = os.path.join(path, name)
                    if os.path.isdir(target) and not os.path.islink(target):
                        shutil.rmtree(target, ignore_errors=True)
                    else:
                        os.unlink(target)

    return run


get_requires_for_build_wheel = _tidy(_setuptools.get_requires_for_build_wheel)
get_requires_for_build_sdist = _tidy(_setuptools.get_requires_for_build_sdist)
prepare_metadata_for_build_wheel = _tidy(_setuptools.prepare_metadata_for_build_wheel)
build_wheel = _tidy(_setuptools.build_wheel)
build_sdist = _tidy(_setuptools.build_sdist)
