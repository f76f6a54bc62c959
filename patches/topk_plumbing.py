"""Publishes the EAGLE topk to the pools ``_init_pools`` builds where ``MambaPool`` does not take it (0.5.12 ...
0.5.13.post1; docs/internals.md)."""

from __future__ import annotations

import logging

from sglang_mamba_dedup import gate
from sglang_mamba_dedup.patcher import self_first

logger = logging.getLogger("sglang_mamba_dedup")


def init_pools(wrapped, instance, args, kwargs):
    _, runner, _, _ = self_first(
        wrapped, instance, args, lambda o: hasattr(o, "server_args"), what="ModelRunner._init_pools"
    )
    sa = getattr(runner, "server_args", None)
    if sa is None or not hasattr(sa, "speculative_eagle_topk"):
        # the topk cannot be read: 'unknown', which the gate answers with SGLang's dense window (strict stops)
        topk = gate._UNSET
        logger.warning(
            "sglang-mamba-dedup: ModelRunner._init_pools called in a form the plugin cannot read (no server_args "
            "on its instance or first argument); the EAGLE topk is unknown, pools keep SGLang's dense window"
        )
    else:
        topk = sa.speculative_eagle_topk
    unified = bool(getattr(sa, "enable_unified_memory", False))
    with gate.speculative_topk(topk, unified=unified):
        return wrapped(*args, **kwargs)
