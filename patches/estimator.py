"""The mamba memory estimator: SGLang's own, run with the draft-token count scoped to ``D_eff`` so that it reserves
the deduplicated scratch, and a top-up for what it leaves out (docs/internals.md; docs/memory.md by release).
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any

from sglang_mamba_dedup import gate, ledger, sizing, state, versions
from sglang_mamba_dedup.sizing import GIB

from . import commit as commit_patch
from . import zero_copy

logger = logging.getLogger("sglang_mamba_dedup")

_MISSING: Any = object()


def _global(wrapped, name: str) -> Any:
    """A global of the estimator's own module (SGLang's runtime-context getters, its helpers), or None."""
    return getattr(wrapped, "__globals__", {}).get(name)


def _settings(wrapped, instance, getter: str) -> Any:
    """The settings the estimator reads: SGLang's runtime-context bag ``getter()`` (0.5.17+), else ``server_args``."""
    fn = _global(wrapped, getter)
    return fn() if fn is not None else getattr(instance, "server_args", None)


def _reads(fn, name: str, names: str = "co_names") -> bool:
    """Whether the installed function's code names ``name`` (``co_names``: read; ``co_varnames``: a local)."""
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    return code is not None and name in getattr(code, names)


def _spec_bag(wrapped):
    getter = _global(wrapped, "get_spec")
    return getter() if getter is not None else None


def _inputs(wrapped, instance) -> tuple[int | None, Any, bool, str]:
    """``(draft_tokens, topk, unified, style)`` as the estimator itself sees them."""
    bag = _spec_bag(wrapped)
    if bag is not None:
        get_memory = _global(wrapped, "get_memory")
        unified = get_memory is not None and bool(getattr(get_memory(), "enable_unified_memory", False))
        return bag.speculative_num_draft_tokens, bag.speculative_eagle_topk, unified, "runtime_context"
    sa = instance.server_args
    unified = bool(getattr(sa, "enable_unified_memory", False))
    return sa.speculative_num_draft_tokens, sa.speculative_eagle_topk, unified, "server_args"


def _replayssm(wrapped, instance) -> tuple[bool, bool]:
    """``(active, estimator_knows)``: whether the pool will run ReplaySSM spec verify (GDN/KDA only), and whether
    the estimator reads that flag (0.5.17+: no per-draft scratch reserved; 0.5.16 reserves the dense one)."""
    get_exec = _global(wrapped, "get_exec")
    if get_exec is not None:
        flag = bool(getattr(getattr(get_exec(), "mamba", None), "enable_linear_replayssm_spec", False))
    else:
        sa = getattr(instance, "server_args", None)
        flag = bool(
            getattr(sa, "enable_linear_replayssm_spec", False) or getattr(sa, "enable_gdn_replayssm_spec", False)
        )
    linear = [getattr(instance, n, None) for n in ("hybrid_gdn_config", "hybrid_kda_config")]
    active = flag and (not hasattr(instance, "hybrid_gdn_config") or any(c is not None for c in linear))
    return active, _reads(wrapped, "enable_linear_replayssm_spec")


def estimator_decision(wrapped, instance) -> tuple[float | None, str | None, dict[str, Any]]:
    """``(D_eff or None, reason, info)`` for this estimator call: the draft-token count to scope so that
    SGLang's ``per_req * D`` reserves what the deduplicated pool allocates per verify row, or why not."""
    spec_alg = getattr(instance, "spec_algorithm", None)
    if spec_alg is None or spec_alg.is_none():
        return None, "speculative decoding off", {}
    d, topk, unified, style = _inputs(wrapped, instance)
    if d is None:
        return None, "speculative_num_draft_tokens unset", {}
    pd_prefill = _global(wrapped, "_pd_prefill_skips_mamba_spec_state")
    if pd_prefill is not None and pd_prefill():
        return None, "PD prefill: SGLang reserves no speculative scratch (and the pool allocates none)", {}
    fused_entry = getattr(instance, "fused_entry_bytes", None)
    if fused_entry is not None and fused_entry("mamba") is not None:
        return None, "fused draft state entry (unified pool)", {}
    cache_params = instance.mambaish_config.mamba2_cache_params
    backport = versions.release().backport
    ok, reason = gate.check(
        device=instance.device,
        speculative_num_draft_tokens=d,
        cache_params=cache_params,
        topk=topk,
        unified=unified,
        backport_problem=commit_patch.backport_problem() if backport else None,
    )
    if not ok:
        return None, reason, {}
    replay, estimator_knows = _replayssm(wrapped, instance)
    info = {"draft_tokens": int(d), "style": style, "replayssm": replay, "cache_params": cache_params}
    if replay and not estimator_knows:
        # 0.5.16: its estimator prices neither ReplaySSM's per-slot rings nor their absence of SSM scratch; a
        # scoped draft count cannot express that, so the estimate stays SGLang's and the ledger shows the gap
        info.pop("cache_params")
        return None, "ReplaySSM on a release whose estimator does not price it (the ledger shows the gap)", info
    if replay:
        # no per-draft scratch reserved; the top-up after the call reserves the conv windows the pool allocates
        return None, "ReplaySSM speculative verify: SGLang reserves no per-draft scratch", info
    d_eff = gate.effective_draft_tokens(cache_params, int(d))
    return d_eff, None, dict(info, effective_draft_tokens=d_eff)


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


def _schedule(wrapped, instance) -> tuple[int | None, int | None, int, int | None]:
    """``(max_mamba_cache_size, max_running_requests, attn_dp_size, mamba_ratio)`` as the estimator left them."""
    src = _settings(wrapped, instance, "get_schedule")
    slots, running = getattr(src, "max_mamba_cache_size", None), getattr(src, "max_running_requests", None)
    dp = getattr(instance, "attn_dp_size", None) or getattr(getattr(instance, "ps", None), "attn_dp_size", None)
    if dp is None:
        sa = getattr(instance, "server_args", None)
        dp = getattr(instance, "dp_size", 1) if getattr(sa, "enable_dp_attention", False) else 1
    ratio_fn = getattr(instance, "_calculate_mamba_ratio", None)
    try:
        ratio = int(ratio_fn()) if ratio_fn is not None else None
    except Exception:  # noqa: BLE001 - a release whose ratio needs state we do not have: no prediction
        ratio = None
    return slots, running, int(dp or 1), ratio


#: Per verify row, the ReplaySSM spec cursors the pool keeps (int32 cache base, int8 flush flag, int32 write
#: position; 0.5.21+ ``MambaPool.__init__``), which SGLang's estimate leaves out.
RING_CURSOR_BYTES = 9


def unreserved_by_sglang(info: dict[str, Any], slots: int, rows: int, scale: float = 1.0) -> dict[str, int]:
    """What the deduplicated ``MambaPool`` will allocate for ``slots`` mamba slots and ``rows`` verify rows (each +1
    padding), by buffer SGLang's estimate prices: state and scratch, and zero-copy's ``accepted`` table where it is
    asked for (SGLang prices none); under ReplaySSM (ring and state priced) the conv-window scratch and spec
    cursors. ``scale``: this PP stage's share of the mamba layers (the table and the cursors are per pool)."""
    import sys

    per = sizing.request_bytes(info["cache_params"], info["draft_tokens"], dedup=True, replayssm=info["replayssm"])
    if info["replayssm"]:
        mamba_pool = getattr(sys.modules.get("sglang.srt.mem_cache.memory_pool"), "MambaPool", None)
        cursors = _reads(getattr(mamba_pool, "__init__", None), "replayssm_spec_write_pos")
        out = {
            "conv_scratch": (rows + 1) * per.conv_scratch_physical,
            "spec_cursors": (rows + 1) * RING_CURSOR_BYTES if cursors else 0,
        }
    else:
        out = {
            "state": (slots + 1) * per.state,
            "ssm_scratch": (rows + 1) * per.ssm_scratch,
            "conv_scratch": (rows + 1) * per.conv_scratch_physical,
        }
        if zero_copy.asked():  # the pool's accepted table, one entry per scratch row (all layers)
            out["zero_copy_accepted"] = (rows + 1) * zero_copy.ACCEPTED_ENTRY_BYTES
    per_layer = ("state", "ssm_scratch", "conv_scratch")
    return {k: int(v * scale) if k in per_layer else v for k, v in out.items()}


def pp_layer_scale(wrapped, instance, cache_params: Any) -> float:
    """The share of the model's mamba layers SGLang charges one pipeline stage: the largest stage's share
    (0.5.17+, whose estimator names ``pp_layer_scale``); 1 without PP or on releases that charge every layer."""
    pp = int(getattr(instance, "pp_size", 1) or 1)
    get_pp_indices = _global(wrapped, "get_pp_indices")
    if pp <= 1 or get_pp_indices is None or not _reads(wrapped, "pp_layer_scale", "co_varnames"):
        return 1.0
    layers = list(cache_params.layers)
    total = int(instance.model_config.num_hidden_layers)
    stage = max(
        sum(1 for i in layers if start <= i < end)
        for start, end in (get_pp_indices(total, rank, pp) for rank in range(pp))
    )
    return stage / max(len(layers), 1)


def ring_over_reservation(wrapped, instance, info: dict[str, Any], rows: int, asked: int, scale: float) -> int:
    """Bytes of ReplaySSM ring SGLang reserves for requests the pool never holds (0.5.20+: a Gated-DeltaNet ring row
    per request asked for, ``max_running_requests + 1``; the pool has one per request admitted). 0 elsewhere."""
    if not info.get("replayssm") or getattr(instance, "hybrid_kda_config", None) is not None:
        return 0
    if not _reads(wrapped, "replay_req_slots", "co_varnames"):
        return 0
    get_exec = _global(wrapped, "get_exec")
    record_len = getattr(getattr(get_exec(), "mamba", None), "linear_replayssm_cache_len", None) if get_exec else None
    ring = sizing.ring_bytes(info["cache_params"], record_len)
    if not ring:
        return 0
    return int(int(ring) * scale) * max(0, asked - rows)


def handle_max_mamba_cache(wrapped, instance, args, kwargs):
    d_eff, reason, info = estimator_decision(wrapped, instance)
    ledger.forget_reservation()  # a failure below leaves no stale reservation for the pool built next
    scoped = d_eff is not None and abs(d_eff - info["draft_tokens"]) > 1e-12
    with _scoped_draft_tokens(wrapped, instance, d_eff) if scoped else contextlib.nullcontext():
        result = wrapped(*args, **kwargs)
    total = kwargs.get("total_rest_memory", args[0] if args else None)
    try:
        reserved = int(round((float(total) - float(result)) * GIB))
    except (TypeError, ValueError):
        reserved = None
    try:
        topup, detail = _top_up(wrapped, instance, info, reserved, 0 if info.get("replayssm") else reserved)
    except Exception as exc:  # noqa: BLE001 - a prediction must never take the server down: SGLang's estimate stays
        logger.warning(
            f"sglang-mamba-dedup: mamba cache estimator could not predict the pool's allocation "
            f"({type(exc).__name__}: {exc}); SGLang's estimate is kept and the ledger will show any gap"
        )
        topup, detail = 0, ""
    if topup:
        result = result - topup / GIB
        reserved += topup
    applied = scoped or topup != 0
    estimate: dict[str, Any] = dict(
        applied=applied,
        reason=None if applied else (reason or "the estimate already reserves the deduplicated scratch"),
        top_up_bytes=topup,
        **{k: v for k, v in info.items() if k != "cache_params"},
    )
    if scoped:
        logger.info(
            f"sglang-mamba-dedup: mamba cache estimator reserves the deduplicated scratch "
            f"(D={info['draft_tokens']} counted as {d_eff:.4f} dense-equivalent draft tokens)"
        )
    if topup > 0:
        # a PD-decode server's pre-allocated rows can be GiBs, and more than one slot's state is more than padding
        pd_decode = bool(info.get("pd_decode_pre_alloc"))
        cp = info.get("cache_params")
        slot = sizing.request_bytes(cp, None, dedup=True).state if cp is not None else 0  # at most a padding row
        give_back = ". Fewer pre-allocated requests (--disaggregation-decode-extra-slots) give it back"
        logger.log(
            logging.WARNING if pd_decode or topup > slot else logging.INFO,
            f"sglang-mamba-dedup: mamba cache estimator reserves {topup / GIB:.3f} GiB ({topup} bytes) more, which "
            f"the pool allocates but SGLang's estimate left out ({detail}); it comes out of the KV cache's share"
            f"{give_back if pd_decode else ''}",
        )
    if topup < 0:
        logger.info(
            f"sglang-mamba-dedup: mamba cache estimator gives {-topup / GIB:.3f} GiB ({-topup} bytes) back to the KV "
            f"cache, which SGLang's estimate reserved but the pool never allocates ({detail})"
        )
    if not applied:
        logger.info("sglang-mamba-dedup: mamba cache estimator unchanged: %s", estimate["reason"])
    if reserved is not None:
        logger.info(
            f"sglang-mamba-dedup: mamba cache estimator budget {float(total):.4f} GiB ({round(float(total) * GIB)} "
            f"bytes): {reserved / GIB:.4f} GiB reserved for {_schedule(wrapped, instance)[0]} mamba slots and their "
            "scratch, the rest for the KV cache"
        )
    ledger.record_reservation(reserved, **estimate)
    _warn_admission(wrapped, instance, info, reserved)
    return result


def _extra_buffer(wrapped, instance) -> bool:
    """Whether the mamba extra (tracking) buffer is on, by the spelling of the release."""
    get_exec = _global(wrapped, "get_exec")
    if get_exec is not None:
        flag = getattr(getattr(get_exec(), "mamba", None), "enable_mamba_extra_buffer", None)
        if flag is not None:
            return bool(flag)
    enabled = _global(wrapped, "mamba_extra_buffer_enabled")
    if enabled is not None:
        return bool(enabled())
    value = getattr(getattr(instance, "server_args", None), "enable_mamba_extra_buffer", False)
    return bool(value() if callable(value) else value)


def default_pre_alloc(requests: int, otherwise: int = 0) -> int:
    """Requests SGLang pre-allocates on a PD-decode server unless told: twice the running requests (per worker) up to
    32, else ``otherwise`` (0.5.14+: 0, resolved in launch hooks the planner does not run; before: the env var)."""
    return 2 * requests if requests <= 32 else otherwise


def pd_decode_rows(wrapped, instance, rows: int) -> tuple[int, int] | None:
    """``(pre_alloc, slots_per_request)`` of the PD-decode pool (``HybridMambaDecodeReqToTokenPool``) this server
    will build, or None; it has ``rows + pre_alloc`` scratch rows and as many requests' slots (SGLang prices ``rows``)."""
    import importlib
    import os

    disagg = _settings(wrapped, instance, "get_disagg")
    mode = getattr(disagg, "disaggregation_mode", _MISSING)
    if mode != "decode" and getattr(disagg, "enable_pd_role_switch", _MISSING) is not True:
        return None
    extra = getattr(disagg, "disaggregation_decode_extra_slots", _MISSING)
    if extra is _MISSING:
        pre = default_pre_alloc(rows, int(os.environ.get("SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS") or 0))
    else:
        pre = int(extra or 0)
    overlap = getattr(_settings(wrapped, instance, "get_schedule"), "disable_overlap_schedule", _MISSING) is not True
    extra_buffer = _extra_buffer(wrapped, instance)
    # the pool's own module (imported by SGLang moments later to build the pool)
    decode = importlib.import_module("sglang.srt.disaggregation.decode")
    tracking = getattr(decode, "get_mamba_tracking_slots", None)
    if tracking is not None:  # 0.5.22+
        per_request = 1 + int(tracking(extra_buffer=extra_buffer, overlap=overlap, lazy=False))
    else:
        per_request = 1 + ((2 if overlap else 1) if extra_buffer else 0)
    return pre, per_request


def _top_up(wrapped, instance, info: dict[str, Any], reserved: int | None, priced: int | None) -> tuple[int, str]:
    """Bytes the pool will allocate beyond what SGLang's estimate reserved (``priced`` of ``reserved`` for those
    buffers), and which buffers: 0 when covered or not predictable; negative under ReplaySSM for ring rows the pool
    never allocates. Adds a PD-decode pool's pre-allocated rows (not under ReplaySSM), prices a PP stage's share."""
    if reserved is None or "cache_params" not in info:
        return 0, ""
    slots, running, dp, ratio = _schedule(wrapped, instance)
    if slots is None or running is None or ratio is None or ratio <= 0:
        return 0, ""
    asked = max(1, int(running) // dp)
    rows = min(asked, int(slots) // ratio)
    scale = pp_layer_scale(wrapped, instance, info["cache_params"])
    what = "the conv-window scratch under ReplaySSM" if info["replayssm"] else "the pool's padding rows"
    if scale != 1.0:
        what += f" (this pipeline stage's {scale:.3f} of the mamba layers)"
    slots = int(slots)
    pd = None if info["replayssm"] else pd_decode_rows(wrapped, instance, rows)
    if pd is not None:
        pre, per_request = pd
        rows += pre
        slots = max(slots, rows * per_request)
        what = f"the PD-decode pool's {pre} pre-allocated requests and padding row"
        info["pd_decode_pre_alloc"] = pre
    by_buffer = unreserved_by_sglang(info, slots, rows, scale)
    over = ring_over_reservation(wrapped, instance, info, rows, asked, scale)
    gap = sum(by_buffer.values()) - (priced if priced is not None else reserved) - over
    named = ", ".join(f"{k} {v / GIB:.4f} GiB" for k, v in by_buffer.items() if v)
    if over:
        info["ring_over_reservation"] = over
        named += (
            f"; SGLang priced ReplaySSM ring rows for {asked} requests, the pool allocates {rows}: "
            f"{over / GIB:.4f} GiB less"
        )
    elif gap <= 0:
        return 0, ""
    return gap, f"{what}; the pool allocates {named}"


def _sglang_warns_of_the_cap(instance) -> bool:
    """Whether SGLang warns itself when the mamba pool caps the running requests (0.5.17+ ``resolve_max_num_reqs``)."""
    fn = getattr(type(instance), "resolve_max_num_reqs", None)
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    return any(isinstance(c, str) and "capped to" in c for c in getattr(code, "co_consts", ()))


def _lift(wrapped, instance, asked: int, slots: int, ratio: int, reserved: int | None):
    """``(fraction, max_mamba_cache_size)`` that admit every request asked for (docs/memory.md "Admission"); the
    fraction None when it cannot be said or no fraction below 1 does."""
    need = asked * ratio
    src = _settings(wrapped, instance, "get_schedule")
    f0, r = getattr(src, "mem_fraction_static", None), getattr(src, "mamba_full_memory_ratio", None)
    cap_fn = _global(wrapped, "get_device_memory_capacity")
    try:
        capacity_gb = float(cap_fn(getattr(instance, "device", "cuda"))) / 1024 if cap_fn else None
    except Exception:  # noqa: BLE001 - no device to ask: no fraction, the size still helps
        capacity_gb = None
    if not (f0 and r and capacity_gb and reserved and slots):
        return None, need
    per_slot = reserved / (slots + 1) / GIB
    extra_rest = (need - slots) * per_slot * (1 + float(r)) / float(r)
    fraction = math.ceil((float(f0) + extra_rest / capacity_gb) * 100) / 100
    return (fraction if fraction < 1 else None), need


def _warn_admission(wrapped, instance, info: dict[str, Any], reserved: int | None) -> None:
    """Once, when the mamba pool caps the running requests: what lifts the cap, at INFO where SGLang warns of the
    cap itself (0.5.17+), else a WARNING with the numbers and the other lifts."""
    slots, running, dp, ratio = _schedule(wrapped, instance)
    if slots is None or running is None or not ratio:
        return
    asked = max(1, int(running) // dp)
    cap = int(slots) // ratio
    if cap >= asked or not state.first_time("admission"):
        return
    fraction, size = _lift(wrapped, instance, asked, int(slots), ratio, reserved)
    exact = f"--max-mamba-cache-size {size}"
    if fraction:
        exact += f" or --mem-fraction-static {fraction:.2f} (about; `sglang-mamba-dedup plan -- <these flags>` gives it exactly)"
    if _sglang_warns_of_the_cap(instance):
        logger.info("sglang-mamba-dedup: to admit all %d requests asked for: %s", asked, exact)
        return
    cp = getattr(getattr(instance, "mambaish_config", None), "mamba2_cache_params", None)
    lifts = [exact]
    if info.get("draft_tokens") and cp is not None:
        per = sizing.request_bytes(cp, 1, dedup=False)
        lifts.append(
            f"lower --speculative-num-draft-tokens (now {info['draft_tokens']}; each draft token is up to "
            f"{(per.ssm_scratch + per.conv_scratch_dense) / sizing.MIB:.1f} MiB of verify scratch per request)"
        )
    sa = getattr(instance, "server_args", None)
    replay_flag = next(
        (n for n in ("enable_linear_replayssm_spec", "enable_gdn_replayssm_spec") if hasattr(sa, n)), None
    )
    linear = getattr(instance, "hybrid_gdn_config", None) is not None
    if info.get("draft_tokens") and not info.get("replayssm") and replay_flag and linear:
        lifts.append(f"add --{replay_flag.replace('_', '-')} (no per-draft SSM scratch)")
    logger.warning(
        f"sglang-mamba-dedup: the mamba state pool caps running requests at {cap} of the {asked} asked for "
        f"({int(slots)} mamba slots, {ratio} per request{' with the radix cache' if ratio > 1 else ''}). To admit "
        f"them all: {'; or '.join(lifts)}."
    )
