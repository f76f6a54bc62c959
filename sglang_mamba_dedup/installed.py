"""This process's one :class:`~sglang_mamba_dedup.patcher.Patcher` over the patch table, and apply / revert /
status on it."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from .patcher import Patcher
from .patches import FEATURES, PATCHES
from .state import STATE

PATCHER = Patcher(PATCHES)
STATE.patch_status = PATCHER.status


def _publish() -> None:
    STATE.commit_installed = bool(PATCHER.applied("commit"))  # for the patch layer, which never imports us


def apply(features: Iterable[str] | None = None, any_release: bool = False) -> dict[str, str | None]:
    """``{feature: None or skip reason}``; ``any_release``: outside the supported range too (``launch_flag``)."""
    if isinstance(features, str):
        features = [features]
    result = PATCHER.apply(FEATURES if features is None else features, any_release=any_release)
    _publish()
    return result


def live_backport_pools() -> int:
    """Pools alive in this process with our back-port layout (their view needs our commit)."""
    return len(STATE.live_backport_pools)


def revert(features: Iterable[str] | None = None, force: bool = False) -> dict[str, str | None]:
    """``{patch name: None if reverted else why kept}``: while a back-ported pool is alive the ``commit`` patch stays
    (SGLang's own scatter cannot read its view), unless ``force=True``."""
    if isinstance(features, str):
        features = [features]
    wanted = list(FEATURES) if features is None else list(features)
    live = 0 if force else live_backport_pools()
    kept: dict[str, str | None] = {}
    if live and "commit" in wanted and PATCHER.applied("commit"):
        wanted = [f for f in wanted if f != "commit"]
        why = (
            f"kept: {live} live MambaPool(s) use the back-ported deduplicated window, which SGLang's own "
            "commit cannot read; drop them (or revert(force=True)) to revert this patch"
        )
        kept = {name: why for name in PATCHER.applied("commit")}
        logging.getLogger("sglang_mamba_dedup").warning("sglang-mamba-dedup revert(): commit patch %s", why)
    result = PATCHER.revert(wanted)
    _publish()
    result.update(kept)
    return result


def status() -> dict[str, dict[str, Any]]:
    return PATCHER.status()
