"""The process-wide patcher over :data:`sglang_mamba_dedup.patches.PATCHES`."""
from __future__ import annotations

from typing import Any, Dict, Iterable, Optional

from .patches import FEATURES, PATCHES
from .registry import Patcher

PATCHER = Patcher(PATCHES)


def apply(features: Optional[Iterable[str]] = None, version: Optional[str] = None) -> Dict[str, Optional[str]]:
    """Apply features (default: all) to the installed SGLang; ``{feature: None or skip reason}``."""
    return PATCHER.apply(FEATURES if features is None else features, version=version)


def revert(features: Optional[Iterable[str]] = None) -> Dict[str, Optional[str]]:
    return PATCHER.revert(features)


def status() -> Dict[str, Dict[str, Any]]:
    return PATCHER.status()
