"""Pool construction and the mamba memory estimator.

Wraps
  * ``sglang.srt.model_executor.model_runner_kv_cache_mixin.ModelRunnerKVCacheMixin._init_pools``
    (0.5.12 ... 0.5.13.post1): those releases do not pass ``speculative_eagle_topk`` to ``MambaPool``.
    For the duration of the call we publish it (and the unified-memory flag) through
    :func:`sglang_mamba_dedup.gate.speculative_topk`, a context variable the pool patch reads. That covers
    every pool ``_init_pools`` builds, ``HybridReqToTokenPool`` and the PD-decode
    ``HybridMambaDecodeReqToTokenPool`` alike (both build their ``MambaPool`` inside it). Draft workers call
    ``_init_pools`` too but share the target's ``req_to_token_pool``, so no second pool is built and
    nothing is wrapped twice (wrapping is per class, once, by the patcher).
  * ``...ModelRunnerKVCacheMixin.handle_max_mamba_cache`` (before ``versions.NEW_LAYOUT_FROM``) and
    ``sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._handle_max_mamba_cache`` (from it on;
    the ranges are the patch table's): SGLang reserves ``mamba_cache_per_req * D`` of speculative scratch per request
    (a dense window per draft token). When the gate would pass, we run SGLang's own estimator with the
    draft-token count scoped to ``D_eff`` (:func:`sglang_mamba_dedup.gate.effective_draft_tokens`), for which
    ``mamba_cache_per_req * D_eff`` is exactly the dedup scratch (dense SSM steps + ``(D+K-2)/(K-1)`` conv
    windows). The same budget then yields more mamba slots; SGLang's arithmetic is not copied. The scope:
    ``get_spec().override(...)`` (SGLang's own scoped override) on 0.5.17+, the ``server_args`` attribute,
    restored in ``finally``, before. The estimator runs once, at start-up, in the scheduler process.
Undone by ``sglang_mamba_dedup.revert()``.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from sglang_mamba_dedup import gate, ledger, versions

from . import verify_commit

logger = logging.getLogger("sglang_mamba_dedup")

#: The last estimator decision in this process (for tests, the doctor and the README numbers).
last_estimate: dict[str, Any] = {}


_warned_unbound: list = []


def init_pools(wrapped, instance, args, kwargs):
    runner = instance
    if runner is None and args and hasattr(args[0], "server_args"):
        # reached through the class attribute with self first (another plugin's wrapper around ours):
        # wrapt passes no instance; the runner is the first argument
        runner = args[0]
        if not _warned_unbound:
            _warned_unbound.append(True)
            logger.warning(
                "sglang-mamba-dedup: ModelRunner._init_pools was called through the class attribute with self "
                "first (another wrapper around ours?); the EAGLE topk is read from that argument"
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
    with gate.speculative_topk(topk, unified=unified, source="ModelRunner._init_pools"):
        return wrapped(*args, **kwargs)


def _spec_bag(wrapped):
    getter = getattr(wrapped, "__globals__", {}).get("get_spec")
    return getter() if getter is not None else None


def _inputs(wrapped, instance) -> tuple[int | None, Any, bool, str]:
    """``(draft_tokens, topk, unified, style)`` as the estimator itself sees them."""
    bag = _spec_bag(wrapped)
    if bag is not None:
        g = getattr(wrapped, "__globals__", {})
        unified = False
        get_memory = g.get("get_memory")
        if get_memory is not None:
            unified = bool(getattr(get_memory(), "enable_unified_memory", False))
        return bag.speculative_num_draft_tokens, bag.speculative_eagle_topk, unified, "runtime_context"
    sa = instance.server_args
    return (
        sa.speculative_num_draft_tokens,
        sa.speculative_eagle_topk,
        bool(getattr(sa, "enable_unified_memory", False)),
        "server_args",
    )


def estimator_decision(wrapped, instance) -> tuple[float | None, str | None, dict[str, Any]]:
    """``(D_eff or None, reason, info)`` for this estimator call."""
    spec_alg = getattr(instance, "spec_algorithm", None)
    if spec_alg is None or spec_alg.is_none():
        return None, "speculative decoding off", {}
    d, topk, unified, style = _inputs(wrapped, instance)
    if d is None:
        return None, "speculative_num_draft_tokens unset", {}
    none_reserved = _no_draft_scratch_reserved(wrapped, instance)
    if none_reserved:
        return None, none_reserved, {}
    fused_entry = getattr(instance, "fused_entry_bytes", None)
    if fused_entry is not None and fused_entry("mamba") is not None:
        return None, "fused draft state entry (unified pool)", {}
    cache_params = instance.mambaish_config.mamba2_cache_params
    ok, reason = gate.check(
        device=instance.device,
        speculative_num_draft_tokens=d,
        cache_params=cache_params,
        topk=topk,
        unified=unified,
        backport_problem=(
            verify_commit.backport_problem()
            if versions.mode_for(versions.installed_sglang_version()) == "backport"
            else None
        ),
    )
    if not ok:
        return None, reason, {}
    d_eff = gate.effective_draft_tokens(cache_params, int(d))
    return d_eff, None, {"draft_tokens": int(d), "effective_draft_tokens": d_eff, "style": style}


def _no_draft_scratch_reserved(wrapped, instance) -> str | None:
    """Why SGLang's estimator reserves no per-draft-token scratch on this call (so scoping the draft-token
    count changes nothing and the plugin must not claim it did), or None. Read the way the installed
    estimator reads it: PD prefill (``_pd_prefill_skips_mamba_spec_state``, 0.5.17+) and ReplaySSM spec
    verify for GDN/KDA (``get_exec().mamba.enable_linear_replayssm_spec``, 0.5.17+;
    ``server_args.enable_gdn_replayssm_spec`` in 0.5.16)."""
    g = getattr(wrapped, "__globals__", {})
    pd_prefill = g.get("_pd_prefill_skips_mamba_spec_state")
    if pd_prefill is not None and pd_prefill():
        return "PD prefill: SGLang reserves no speculative scratch"
    get_exec = g.get("get_exec")
    if get_exec is not None:
        replay = bool(getattr(getattr(get_exec(), "mamba", None), "enable_linear_replayssm_spec", False))
    else:
        sa = getattr(instance, "server_args", None)
        replay = bool(
            getattr(sa, "enable_linear_replayssm_spec", False) or getattr(sa, "enable_gdn_replayssm_spec", False)
        )
    linear = [getattr(instance, n, None) for n in ("hybrid_gdn_config", "hybrid_kda_config")]
    if replay and (not hasattr(instance, "hybrid_gdn_config") or any(c is not None for c in linear)):
        return (
            "ReplaySSM speculative verify: SGLang reserves no per-draft scratch here, so the deduplicated "
            "window frees nothing in this estimate (its conv-window scratch is allocated but not reserved)"
        )
    return None


@contextlib.contextmanager
def _scoped_draft_tokens(wrapped, instance, value: float):
    bag = _spec_bag(wrapped)
    if bag is not None:
        with bag.override(speculative_num_draft_tokens=value):
            yield
        return
    sa = instance.server_args
    saved = sa.speculative_num_draft_tokens
    sa.speculative_num_draft_tokens = value
    try:
        yield
    finally:
        sa.speculative_num_draft_tokens = saved


def handle_max_mamba_cache(wrapped, instance, args, kwargs):
    d_eff, reason, info = estimator_decision(wrapped, instance)
    last_estimate.clear()
    if d_eff is None:
        last_estimate.update(applied=False, reason=reason)
        logger.info("sglang-mamba-dedup: mamba cache estimator unchanged: %s", reason)
        result = wrapped(*args, **kwargs)
    else:
        with _scoped_draft_tokens(wrapped, instance, d_eff):
            result = wrapped(*args, **kwargs)
        last_estimate.update(applied=True, reason=None, **info)
        logger.info(
            "sglang-mamba-dedup: mamba cache estimator reserves the deduplicated scratch "
            "(D=%d counted as %.4f dense-equivalent draft tokens)",
            info["draft_tokens"],
            d_eff,
        )
    _record_reservation(args, kwargs, result)
    return result


def _record_reservation(args, kwargs, result) -> None:
    """What the estimator took for the mamba pool: the memory it was given minus what it returns (GB)."""
    total = kwargs.get("total_rest_memory", args[0] if args else None)
    try:
        reserved = int(round((float(total) - float(result)) * ledger.GIB))
    except (TypeError, ValueError):
        return
    last_estimate["reserved_bytes"] = reserved
    ledger.record_reservation(reserved, applied=last_estimate.get("applied"), reason=last_estimate.get("reason"))
