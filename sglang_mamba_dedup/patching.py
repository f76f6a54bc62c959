"""The process-wide patcher over :data:`sglang_mamba_dedup.patches.PATCHES`."""
from __future__ import annotations

from typing import Any, Dict, Iterable, Optional

from .patches import FEATURES, PATCHES
from .registry import Patcher

PATCHER = Patcher(PATCHES)


def apply(
    features: Optional[Iterable[str]] = None, version: Optional[str] = None, any_release: bool = False
) -> Dict[str, Optional[str]]:
    """Apply features (default: all) to the installed SGLang; ``{feature: None or skip reason}``.

    ``any_release``: apply even outside the supported range (only for ``launch_flag``, so that the flag never
    breaks a launch); each target is still resolved and its signature checked."""
    if isinstance(features, str):
        features = [features]
    return PATCHER.apply(FEATURES if features is None else features, version=version, any_release=any_release)


def revert(features: Optional[Iterable[str]] = None) -> Dict[str, Optional[str]]:
    return PATCHER.revert(features)


def status() -> Dict[str, Dict[str, Any]]:
    return PATCHER.status()
