"""The EAGLE topk for pools built by ``ModelRunnerKVCacheMixin._init_pools`` (SGLang 0.5.12 ... 0.5.13.post1).

Those releases do not pass ``speculative_eagle_topk`` to ``MambaPool``: for the duration of the call the wrapper
publishes it (and the unified-memory flag) through :func:`sglang_mamba_dedup.gate.speculative_topk`. That covers
every pool ``_init_pools`` builds, ``HybridReqToTokenPool`` and the PD-decode ``HybridMambaDecodeReqToTokenPool``
alike. Draft workers call ``_init_pools`` too but share the target's ``req_to_token_pool``: no second pool.
"""

from __future__ import annotations

import logging

from sglang_mamba_dedup import gate, state

logger = logging.getLogger("sglang_mamba_dedup")


def init_pools(wrapped, instance, args, kwargs):
    runner = instance
    if runner is None and args and hasattr(args[0], "server_args"):
        # reached through the class attribute with self first (another plugin's wrapper around ours):
        # wrapt passes no instance; the runner is the first argument
        runner = args[0]
        state.warn_once(
            "init_pools unbound",
            "sglang-mamba-dedup: ModelRunner._init_pools was called through the class attribute with self "
            "first (another wrapper around ours?); the EAGLE topk is read from that argument",
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
