"""Where a release test runs when its subject does not change between releases of one era.

CI runs the tests marked ``release`` on all 15 releases (docs/ci.md). A test whose subject is the same code on
every release of an era of the patch table (the back-port, upstream's dedup in the old module layout, the new
layout: :mod:`sglang_mamba_dedup.versions` names the boundaries) runs on the newest release of each era only,
when what it goes through on SGLang's side is checked to be the same everywhere else (see ``LOADER_MD5``).
``SMD_EVERY_RELEASE=1`` runs such tests on every release anyway.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os

import pytest

from sglang_mamba_dedup import versions


def _newest_per_era() -> tuple[str, ...]:
    eras: dict[tuple[bool, bool], str] = {}
    for r in versions.RELEASES:  # oldest first: the last one written per era is its newest
        eras[(r in versions.BACKPORT, r in versions.OLD_LAYOUT)] = r
    return tuple(sorted(eras.values(), key=versions.parse))


#: The newest release of each era: 0.5.13.post1, 0.5.15.post1, 0.5.23 today.
NEWEST_PER_ERA = _newest_per_era()

#: md5 of ``sglang/srt/plugins/__init__.py`` (SGLang's plugin loader), the same file in all 15 releases
#: (0.5.12-0.5.23, checked 2026-12-04): the tests of our entry point *through* that loader in fresh processes run
#: once per era; ``test_sglang_plugin_loader_is_the_one_the_era_tests_assume`` checks it on every release.
LOADER_MD5 = "deff09e7c825241b772e979be948bf15"


def loader_md5() -> str | None:
    spec = importlib.util.find_spec("sglang.srt.plugins")
    if spec is None or spec.origin is None:
        return None
    with open(spec.origin, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


def installed() -> str | None:
    return versions.installed_sglang_version()


#: Marks a test that runs on the newest release of each era (or everywhere with ``SMD_EVERY_RELEASE=1``).
once_per_era = pytest.mark.skipif(
    installed() not in NEWEST_PER_ERA and not os.environ.get("SMD_EVERY_RELEASE"),
    reason=f"the same code on every release of its era: runs on {', '.join(NEWEST_PER_ERA)} (docs/ci.md)",
)
