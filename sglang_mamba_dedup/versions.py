"""Which SGLang releases we support, read from package metadata without importing SGLang.

The range is declared once here and mirrored in ``pyproject.toml``'s ``sglang`` extra
(a test checks they agree).
"""
from __future__ import annotations

import importlib.metadata
from typing import Optional

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

#: Every SGLang release the plugin knows how to patch (0.5.12 ... 0.5.23 and its post releases).
SUPPORTED = SpecifierSet(">=0.5.12,<0.5.24")

#: Releases that allocate the deduplicated conv window themselves (FACTS §1). Below this we back-port it.
UPSTREAM_DEDUP = SpecifierSet(">=0.5.14")

#: Releases whose scatter kernels live in ``sglang.kernels.ops`` and pools in ``kv_cache_configurator``.
NEW_LAYOUT = SpecifierSet(">=0.5.17")


def installed_sglang_version() -> Optional[str]:
    """The installed SGLang version string, or None when SGLang is not installed."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def parse(version: str) -> Optional[Version]:
    try:
        return Version(version)
    except InvalidVersion:
        return None


def in_range(version: Optional[str], spec: SpecifierSet = SUPPORTED) -> bool:
    v = parse(version) if version else None
    return v is not None and spec.contains(v, prereleases=True)


def mode_for(version: Optional[str]) -> str:
    """How the plugin works on a release: 'backport', 'takeover' or 'unsupported'."""
    if not in_range(version):
        return "unsupported"
    return "takeover" if in_range(version, UPSTREAM_DEDUP) else "backport"


def support_problem(version: Optional[str]) -> Optional[str]:
    """None when ``version`` is supported, else a sentence saying why not."""
    if version is None:
        return "SGLang is not installed"
    if parse(version) is None:
        return f"SGLang reports an unparsable version {version!r}"
    if not in_range(version):
        return f"SGLang {version} is outside the supported range {SUPPORTED}"
    return None
