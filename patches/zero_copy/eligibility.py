"""Whether a pool may take the zero-copy commit: SGLang's resolved settings (:func:`settings_problem` over the rules
:data:`RULES`, read by :mod:`sglang_mamba_dedup.resolved`), the backend and its pool (:func:`backend_problem`), decided
once per pool at its backend's first forward (:func:`decide`: one log line either way, strict mode stops; the reason
kept on the pool's :class:`~sglang_mamba_dedup.state.PoolState`). Each excluded case and why: docs/zero-copy.md
section 6.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from sglang_mamba_dedup import env, report, resolved, state
from sglang_mamba_dedup.resolved import ABSENT

from . import asked, pool_of, radix_opt_out, radix_value_problem, radix_wanted

logger = logging.getLogger("sglang_mamba_dedup")


@dataclasses.dataclass(frozen=True)
class Rule:
    """One excluded case of docs/zero-copy.md section 6 that SGLang's resolved settings decide: ``ok`` gets the
    values of ``names`` in order (as :func:`~sglang_mamba_dedup.resolved.read` gives them) and says whether zero-copy
    is safe; ``why`` is the refusal. A setting the release does not have refuses ("cannot read"), unless the rule
    takes ``absent`` values: then ``ok`` gets :data:`~sglang_mamba_dedup.resolved.ABSENT` and says what it means.
    ``why`` may be a function of nothing that gives the line (read when the rule refuses)."""

    names: tuple[str, ...]
    ok: Callable[..., bool]
    why: str | Callable[[], str]  # a callable: the line depends on the environment (said when the rule refuses)
    absent: bool = False


def _off_or_absent(value: Any) -> bool:
    """Off, or not an option of this release (so never on)."""
    return value is ABSENT or not value


def _radix_allowed(radix_off: Any) -> bool:
    """The radix cache off, or on without the operator's opt-out (:data:`env.ZERO_COPY_RADIX`)."""
    return bool(radix_off) or radix_wanted()


def _radix_kept_off() -> str:
    """Why the radix cache on keeps today's commit: the operator's opt-out (or a value not understood)."""
    return radix_value_problem() or (
        f"the radix cache is on and {radix_opt_out()} keeps zero-copy off there (unset it to serve zero-copy with "
        "the radix cache, proven end to end in docs/e2e.md)"
    )


def _radix_on_and(check: Callable[..., bool]) -> Callable[..., bool]:
    """A rule that matters only with the radix cache on: ``check`` gets the rule's other values."""
    return lambda radix_off, *values: bool(radix_off) or check(*values)


def _unset_or_absent(value: Any) -> bool:
    """Not set (None), or not an option of this release."""
    return value is ABSENT or value is None


def _one_or_absent(value: Any) -> bool:
    return value is ABSENT or value is None or int(value) == 1


def _lazy_needs_overlap(lazy: Any, no_overlap: Any) -> bool:
    return not (lazy is not ABSENT and lazy and no_overlap is not ABSENT and no_overlap)


#: With the radix cache on (docs/zero-copy.md §12.7 and review fix R1): the tree must take only track slots, which
#: SGLang's extra buffer guarantees (``extra_buffer``, or ``extra_buffer_lazy`` with overlap, as SGLang allows);
#: everything else that reads or writes tree or request slots is not analysed and refused, one line each.
_RADIX = "disable_radix_cache"
RADIX_RULES: tuple[Rule, ...] = (
    Rule((_RADIX,), _radix_allowed, _radix_kept_off),
    Rule(
        (_RADIX, "mamba_radix_cache_strategy", "enable_mamba_extra_buffer"),
        _radix_on_and(lambda _strategy, extra: extra is not ABSENT and bool(extra)),
        "the radix cache is on with the mamba strategy no_buffer (the tree takes a request's live slot, stale "
        "under zero-copy; use --mamba-radix-cache-strategy extra_buffer)",
        absent=True,
    ),
    Rule(
        (_RADIX, "enable_mamba_extra_buffer_lazy", "disable_overlap_schedule"),
        _radix_on_and(_lazy_needs_overlap),
        "extra_buffer_lazy without the overlap schedule (SGLang does not allow it)",
        absent=True,
    ),
    Rule(
        (_RADIX, "radix_cache_backend"),
        _radix_on_and(_unset_or_absent),
        "another radix cache backend (the tripwire and the simulation know SGLang's UnifiedRadixCache only)",
        absent=True,
    ),
    Rule(
        (_RADIX, "enable_hierarchical_cache"),
        _radix_on_and(_off_or_absent),
        "HiCache with the radix cache on (host copies of tree states on another stream: not analysed)",
        absent=True,
    ),
    Rule(
        (_RADIX, "hicache_storage_backend"),
        _radix_on_and(_unset_or_absent),
        "a HiCache storage backend with the radix cache on (tree states loaded back into request slots: not analysed)",
        absent=True,
    ),
    Rule(
        (_RADIX, "dcp_size"),
        _radix_on_and(_one_or_absent),
        "decode context parallelism with the radix cache on (another track grid for extends: not analysed)",
        absent=True,
    ),
    Rule(
        (_RADIX, "enable_lmcache"),
        _radix_on_and(_off_or_absent),
        "LMCache with the radix cache on (it loads states into request slots: not analysed)",
        absent=True,
    ),
    Rule(
        (_RADIX, "enable_flexkv"),
        _radix_on_and(_off_or_absent),
        "FlexKV with the radix cache on (its own tree cache: not analysed)",
        absent=True,
    ),
    Rule(
        (_RADIX, "enable_unified_cache_external_linker"),
        _radix_on_and(_off_or_absent),
        "the unified cache's external linker (it writes a request's slot at prepare: not analysed)",
        absent=True,
    ),
    Rule(
        (_RADIX, "enable_int8_mamba_checkpoint"),
        _radix_on_and(_off_or_absent),
        "int8 mamba checkpoints with the radix cache on (store_from_active / load_to_active: not simulated)",
        absent=True,
    ),
)


#: The excluded cases the settings decide, in the order they are asked.
RULES: tuple[Rule, ...] = (
    Rule(
        ("speculative_algorithm",),
        lambda v: getattr(v, "name", str(v)).upper() in ("EAGLE", "NEXTN", "MTP"),
        "not NEXTN/EAGLE",
    ),
    Rule(("speculative_eagle_topk",), lambda v: v is None or int(v) <= 1, "topk > 1 (tree verify)"),
    *RADIX_RULES,
    Rule(("enable_linear_replayssm",), lambda v: not v, "ReplaySSM owns the state"),
    Rule(("enable_linear_replayssm_spec",), lambda v: not v, "ReplaySSM owns the commit"),
    Rule(("disaggregation_mode",), lambda v: str(v) == "null", "PD disaggregation transfers the committed state"),
    Rule(("pp_size",), lambda v: int(v) == 1, "pipeline parallelism (delayed commit)"),
    Rule(("enable_dp_attention",), lambda v: not v, "DP attention (padded warm-up rows)"),
    Rule(("enable_two_batch_overlap",), lambda v: not v, "two-batch overlap (not analysed)"),
    Rule(("enable_mixed_chunk",), lambda v: not v, "mixed chunked prefill (a decode row inside an extend)"),
    Rule(("speculative_adaptive",), _off_or_absent, "an adaptive draft count", absent=True),
    Rule(("enable_multi_layer_eagle",), _off_or_absent, "multi-layer EAGLE (not analysed)", absent=True),
)


def _names(rules: tuple[Rule, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n for rule in rules for n in rule.names))


def read_settings() -> dict[str, Any]:
    """The resolved settings :data:`RULES` read, as this process's published launch has them
    (:func:`sglang_mamba_dedup.resolved.read`: the runtime-context bags, where resolution decided them)."""
    return resolved.read(names=_names(RULES))


def settings_problem(settings: Mapping[str, Any], rules: tuple[Rule, ...] = RULES) -> str | None:
    """Why these settings keep today's commit (the first of ``rules`` not met), or None; pure."""
    for rule in rules:
        values = tuple(settings.get(n, ABSENT) for n in rule.names)
        missing = [n for n, v in zip(rule.names, values, strict=True) if v is ABSENT]
        if missing and not rule.absent:
            return f"cannot read SGLang's setting {missing[0]}"
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(rule.names, values, strict=True))
        try:
            if not rule.ok(*values):
                return f"{rule.why() if callable(rule.why) else rule.why} ({shown})"
        except (TypeError, ValueError):
            return f"{shown} is not understood"
    if os.environ.get("SGLANG_ENABLE_PP_SPEC", "").strip().lower() in ("1", "true", "yes", "on"):
        return "SGLANG_ENABLE_PP_SPEC is set (pipeline stable rows)"
    return None


def radix_strategy(settings: Mapping[str, Any]) -> str | None:
    """The mamba radix-cache strategy these settings (passed by the gate, so with the extra buffer) serve zero-copy
    with, from SGLang's own lazy flag, or None with the radix cache off."""
    if settings.get(_RADIX, ABSENT) is ABSENT or settings[_RADIX]:
        return None
    lazy = settings.get("enable_mamba_extra_buffer_lazy", ABSENT)
    return "extra_buffer_lazy" if lazy is not ABSENT and lazy else "extra_buffer"


def _verify_kernel_problem(backend) -> str | None:
    """GDN: SGLang's Triton verify must be the one that runs; Mamba2: the Triton selective-state update (H1 is
    proven for those kernels only)."""
    if type(backend).__name__ == "Mamba2AttnBackend":
        from sglang.kernels.ops.mamba.triton_ops import ssu_dispatch

        ssu = type(getattr(ssu_dispatch, "_mamba_ssu_backend", None)).__name__
        return None if ssu == "TritonSSUBackend" else f"the Mamba2 state update is {ssu}, not SGLang's Triton one"
    verify = getattr(getattr(backend, "kernel_dispatcher", None), "verify_kernel", None)
    if type(verify).__name__ != "TritonGDNKernel":
        return f"the verify kernel is {type(verify).__name__}, not SGLang's Triton GDN verify"
    return None


def backend_problem(backend) -> str | None:
    """Why this GDN or Mamba2 backend's pool keeps today's commit (pool, scratch, layers, verify kernel, side states)."""
    rtp = getattr(backend, "req_to_token_pool", None)
    pool = pool_of(backend)
    ps = state.pool_state_of(pool)
    if pool is None or ps is None or not ps.commit_ok:
        return "the plugin's commit does not serve this pool"
    cache = pool.mamba_cache
    scratch = getattr(cache, "intermediate_ssm", None)
    if scratch is None or scratch.dim() != cache.temporal.dim() + 1:  # [L, S+1, D, *state] vs [L, slots+1, *state]
        return "no per-step SSM scratch (a draft's pool, or ReplaySSM)"
    if scratch.dtype != cache.temporal.dtype:
        return f"the scratch dtype {scratch.dtype} differs from the state's {cache.temporal.dtype}"
    rows = getattr(rtp, "size", None)
    if not isinstance(rows, int) or scratch.shape[1] < rows + 1:
        return f"{scratch.shape[1]} scratch rows for {rows} request rows (one per request row, plus row 0)"
    layers = getattr(rtp, "mamba_map", None)
    if not isinstance(layers, dict) or not layers:
        return "the pool names no linear layers (mamba_map): the first and last layer of a forward are unknown"
    if getattr(backend, "accept_lens_pool", None) is not None:
        return "KDA fused accept"
    problem = _verify_kernel_problem(backend)
    if problem:
        return problem
    for side, field in (("short_conv_pool", "conv_state"), ("ngram_pool", "context")):
        if getattr(getattr(rtp, side, None), field, None) is not None:
            return f"the model has PLE side states ({side})"
    return None


#: R12: a draft's linear layers read the committed state between verifies, which zero-copy leaves stale in the pool.
#: SGLang 0.5.23 gives such a draft its own pool (``clone_with_new_mamba``, multi-layer EAGLE only, refused by its
#: setting and by that pool's missing scratch); a draft backend on the target's own pool is refused here.
_DRAFT = "a draft worker's linear layers share this pool (R12: the draft must have none)"


def _draft_on_a_zero_copy_pool() -> None:
    """A draft worker's linear backend on a pool whose target already took zero-copy: the draft gets the stock
    path; the pool cannot go back (the target's graphs are captured), so this is said as an ERROR, strict stops."""
    msg = f"zero-copy commit is on for this pool, but {_DRAFT}: its reads of the pool's state may be stale"
    if state.is_strict():
        raise RuntimeError(f"sglang-mamba-dedup strict mode: {msg}")
    if state.first_time("zero_copy_draft_on_pool"):
        logger.error("sglang-mamba-dedup: %s; launch without %s", msg, env.ZERO_COPY)
    return None


def replayssm_hint(backend, settings: Mapping[str, Any]) -> str:
    """The sentence zero-copy's log line adds on a Gated DeltaNet pool of a release with ReplaySSM-spec: that SGLang's
    own copy-free verify measured faster (it also skips the per-draft SSM writes; not bit-exact to stock), else ""."""
    if type(backend).__name__ == "Mamba2AttnBackend" or "enable_linear_replayssm_spec" not in settings:
        return ""
    return (
        "; on Gated DeltaNet SGLang's --enable-linear-replayssm-spec measured faster than zero-copy (prefix cache "
        "on, a lent H100) and is not bit-exact to stock (docs/benchmarks.md)"
    )


def _capturing() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def decide(backend):
    """This backend's pool's :class:`~.bookkeeping.ZeroCopy`, or None: decided once per pool (one log line either
    way; strict stops)."""
    pool = pool_of(backend)
    if pool is None:
        return None
    rtp = getattr(backend, "req_to_token_pool", None)
    ps = state.pool_state(pool)
    if getattr(backend, "is_draft_worker", False) and ps.zero_copy is not None:
        return _draft_on_a_zero_copy_pool()
    if ps.zero_copy_decided:
        return ps.zero_copy
    if not asked():  # not asked for (a test that applied every feature): stock, silently
        ps.zero_copy_decided, ps.zero_copy, ps.zero_copy_reason = True, None, None
        return None
    reason = _DRAFT if getattr(backend, "is_draft_worker", False) else backend_problem(backend)
    if reason is None and ps.accepted is None and _capturing():
        reason = "the pool was built without the accepted table and this first verify is inside a CUDA-graph capture"
    settings: Mapping[str, Any] = {}
    if reason is None:
        try:
            settings = read_settings()
            reason = settings_problem(settings)
        except Exception as exc:  # noqa: BLE001 - unreadable settings: not proven safe
            reason = f"cannot read SGLang's settings ({type(exc).__name__}: {exc})"
    zc = None
    if reason is None:
        from .bookkeeping import ZeroCopy

        zc = ZeroCopy(pool, layers=(min(rtp.mamba_map), max(rtp.mamba_map)), radix=radix_strategy(settings))
    ps.zero_copy_decided, ps.zero_copy, ps.zero_copy_reason = True, zc, reason
    if zc is None:
        report.record_zero_copy(f"off: {reason}")  # a log line; the pool's reason is the one /get_server_info says
        if state.is_strict():
            raise RuntimeError(f"sglang-mamba-dedup strict mode: {env.ZERO_COPY} asked for, but {reason}")
        logger.warning("sglang-mamba-dedup: zero-copy commit asked for, stays off for this pool: %s", reason)
    else:
        report.record_zero_copy("on")
        logger.info(
            "sglang-mamba-dedup: zero-copy commit on (%d scratch rows of %d steps, linear layers %d-%d, %s): verify "
            "seeds from the scratch, the commit moves no SSM bytes; the scratch rows hold the live SSM states, a "
            "running request's slot in the pool is stale between verifies%s",
            zc.accepted.shape[0],
            zc.pitch,
            *zc.layers,
            "radix cache off"
            if zc.radix is None
            else f"radix cache on, mamba strategy {zc.radix}: track slots written by the same launch",
            replayssm_hint(backend, settings),
        )
    return zc
