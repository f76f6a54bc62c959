"""The conv-window scratch layout of ``MambaPool`` (its ``__init__``; docs/internals.md says why so). Back-port:
SGLang's own non-speculative construction, then the deduplicated scratch in the same memory-saver region and
memory pool (the dense window is never allocated). Take-over: SGLang's construction, then a check that its window
is the overlapping view. A gate 'no' keeps SGLang's stock layout (strict mode: a RuntimeError). The pool is tagged
its :class:`~sglang_mamba_dedup.state.PoolState` ``layout`` and ``commit_ok`` (whether our commit kernel may serve
it, read by :mod:`.commit`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging

from sglang_mamba_dedup import gate, ledger, report, sizing, state, versions
from sglang_mamba_dedup.env import SWITCH
from sglang_mamba_dedup.patcher import self_first
from sglang_mamba_dedup.sizing import GIB
from sglang_mamba_dedup.state import STATE

from . import commit as commit_patch
from . import zero_copy

logger = logging.getLogger("sglang_mamba_dedup")

_sglang_version = versions.sglang_version


def _is_backport() -> bool:
    return versions.release(_sglang_version()).backport


def _normalise_call(wrapped, instance, args, kwargs):
    """``(bound_init, instance, kwargs)`` for however the constructor was reached, or None. Another plugin may call
    the class attribute (wrapt then passes no instance and ``self`` first) or pass arguments positionally."""
    bound, instance, call_args, _ = self_first(wrapped, instance, args, lambda o: hasattr(o, "__dict__"))
    if instance is None:
        return None
    if call_args:
        try:
            params = list(inspect.signature(getattr(wrapped, "__func__", wrapped)).parameters)
        except (TypeError, ValueError):
            return None
        if params and params[0] == "self":
            params = params[1:]
        ba = dict(zip(params, call_args))
        if len(ba) != len(call_args) or set(ba) & set(kwargs):
            return None
        kwargs = {**ba, **kwargs}
    return bound, instance, dict(kwargs)


def mamba_pool_init(wrapped, instance, args, kwargs):
    norm = _normalise_call(wrapped, instance, args, kwargs)
    if norm is None:
        reason = "MambaPool.__init__ was called in a form the plugin cannot read (no instance or unknown arguments)"
        _refuse_if_strict(reason)
        state.warn_once("odd_call", "sglang-mamba-dedup: %s; this pool keeps SGLang's stock layout", reason)
        report.record_layout("stock", reason, 0, 0, release=_sglang_version())
        return wrapped(*args, **kwargs)
    bound, instance, kwargs = norm
    result = _backport_init(bound, instance, kwargs) if _is_backport() else _takeover_init(bound, instance, kwargs)
    if zero_copy.asked():
        zero_copy.prepare(instance)  # before the ledger, which counts it (the estimator reserved it)
    _record_ledger(instance)
    return result


def _record_ledger(instance) -> None:
    """Log and record the pool's ledger. SGLang's ``State.mem_usage_bytes()`` (``get_kv_size_bytes``) sums logical
    sizes, counting the deduplicated view as a dense window: this pool's state answers in physical bytes instead."""
    try:
        doc = ledger.build(instance)
        cache = getattr(instance, "mamba_cache", None)
        if cache is not None and callable(getattr(cache, "mem_usage_bytes", None)):
            physical = ledger.state_bytes(cache)
            object.__setattr__(cache, "mem_usage_bytes", lambda: physical)  # the state dataclass is frozen
    except Exception as exc:  # noqa: BLE001 - bookkeeping must never break a pool
        logger.debug("sglang-mamba-dedup: no memory ledger for this pool: %s", exc)
        return
    ledger.log(doc)
    report.record_ledger(doc)


UNIFIED_REASON = (
    "UnifiedMambaPool (--enable-unified-memory) builds its own states with a dense conv-window scratch and "
    "never runs MambaPool.__init__; the plugin does not serve it (SGLang's layout and commit)"
)


def unified_mamba_pool_init(wrapped, instance, args, kwargs):
    """``UnifiedMambaPool.__init__`` (0.5.15+): not served, but said once, recorded, and refused in strict."""
    d = kwargs.get("speculative_num_draft_tokens")
    if d is not None:
        _refuse_if_strict(UNIFIED_REASON)
    result = wrapped(*args, **kwargs)
    target = instance if instance is not None else (args[0] if args else None)
    _record_stock(target, UNIFIED_REASON, d, commit_reason=UNIFIED_REASON, pool="UnifiedMambaPool")
    if d is not None:
        state.warn_once("unified", "sglang-mamba-dedup: %s", UNIFIED_REASON)
    else:
        logger.info("sglang-mamba-dedup: %s (no speculative scratch: nothing to deduplicate)", UNIFIED_REASON)
    return result


def _record_stock(target, reason: str, d, *, spec: bool = True, commit_reason: str, **extra) -> None:
    """Tag and record SGLang's stock layout, which keeps SGLang's commit: our kernel serves only the deduplicated
    layouts it was checked on (tree verify with topk > 1 has no GPU evidence for it)."""
    dense = 0
    if spec and d is not None:
        with contextlib.suppress(Exception):  # report only
            dense = sizing.nbytes(target.mamba_cache.intermediate_conv_window)
    with contextlib.suppress(AttributeError):
        ps = state.pool_state(target)
        ps.layout, ps.commit_ok = "stock", False
    report.record_layout(
        "stock",
        reason,
        dense,
        dense,
        release=_sglang_version(),
        draft_tokens=d,
        commit="sglang",
        commit_reason=commit_reason,
        **extra,
    )


def _keep_stock(instance, reason: str, kwargs, *, spec: bool) -> None:
    _record_stock(
        instance,
        reason,
        kwargs.get("speculative_num_draft_tokens"),
        spec=spec and kwargs.get("cache_params") is not None,
        commit_reason="SGLang's stock layout keeps SGLang's commit",
    )
    if spec:
        logger.warning("sglang-mamba-dedup: MambaPool keeps SGLang's dense conv-window scratch: %s", reason)
    else:
        logger.info("sglang-mamba-dedup: MambaPool without speculative scratch: %s", reason)


def _gate(instance, kwargs, *, backport: bool = False):
    ctx = gate.pool_context()
    if "speculative_eagle_topk" in kwargs:
        topk = kwargs["speculative_eagle_topk"]
    elif ctx is not None:
        topk = ctx.topk
    else:
        # 0.5.14+ take the topk as a keyword defaulting to None (= 1, as upstream's own gate reads it);
        # 0.5.12 ... 0.5.13.post1 have no such parameter: unknown unless _init_pools published it.
        topk = gate._UNSET if _is_backport() else None
    return gate.check(
        backport_problem=commit_patch.backport_problem() if backport else None,
        device=kwargs.get("device"),
        speculative_num_draft_tokens=kwargs.get("speculative_num_draft_tokens"),
        cache_params=kwargs.get("cache_params"),
        topk=topk,
        unified=ctx is not None and bool(ctx.unified),
        pool=instance,
    )


def _refuse_if_strict(reason: str) -> None:
    if state.is_strict():
        raise RuntimeError(
            f"sglang-mamba-dedup strict mode ({SWITCH}=strict): the deduplicated conv-window cache "
            f"cannot be used for this MambaPool: {reason}"
        )


def _commit_problem(instance, kwargs) -> str | None:
    """None when our fused commit may serve this pool (any window layout; SGLang's scatter semantics)."""
    cache = getattr(instance, "mamba_cache", None)
    if cache is None or not getattr(cache, "intermediate_conv_window", None):
        return "no speculative conv-window scratch"
    if getattr(cache, "intermediate_ssm", None) is None:
        return "no intermediate_ssm (ReplaySSM speculative decoding keeps SGLang's commit)"
    for problem in (gate.device_problem(kwargs.get("device")), gate.model_problem(kwargs.get("cache_params"))):
        if problem:
            return problem
    kernel = commit_patch.kernel_problem()
    if kernel:
        return f"the plugin's commit kernel is unavailable: {kernel}"
    return None


def _record_dedup(instance, layout: str, note, dense: int, physical: int, commit_problem, d, cache_params, kinds: int):
    report.record_layout(
        layout,
        note,
        dense,
        physical,
        commit="ours" if commit_problem is None else "sglang",
        commit_reason=commit_problem,
        release=_sglang_version(),
        draft_tokens=d,
        conv_kernel=gate.conv_kernel_of(cache_params),
        conv_kinds=kinds,
        mem_usage_bytes=int(round(instance.mem_usage * GIB)),
    )


def _mem_usage_bytes(cache, physical: int) -> int:
    """SGLang's ``mem_usage`` (every tensor field's logical bytes), with the conv windows at their physical size."""
    import torch

    total = 0
    for f in dataclasses.fields(cache):
        value = getattr(cache, f.name)
        if f.name == "intermediate_conv_window":
            total += physical
        elif isinstance(value, (torch.Tensor, list)):
            total += sizing.nbytes(value)
    return total


def _backport_init(wrapped, instance, kwargs):
    ok, reason = _gate(instance, kwargs, backport=True)
    if ok:
        # SGLang's own non-speculative construction: persistent states only, no scratch at all.
        result = wrapped(**dict(kwargs, speculative_num_draft_tokens=None))
        _add_dedup_scratch(wrapped, instance, kwargs)
        return result
    spec = kwargs.get("speculative_num_draft_tokens") is not None
    if spec:
        _refuse_if_strict(reason)
    result = wrapped(**kwargs)
    _keep_stock(instance, reason, kwargs, spec=spec)
    return result


def _alloc_context(wrapped, instance):
    """The memory-saver region and custom memory pool SGLang's constructor allocates under."""
    import torch

    stack = contextlib.ExitStack()
    tag = getattr(wrapped, "__globals__", {}).get("GPU_MEMORY_TYPE_KV_CACHE")
    if tag is None:
        from sglang.srt.constants import GPU_MEMORY_TYPE_KV_CACHE as tag  # noqa: N811
    stack.enter_context(instance.memory_saver_adapter.region(tag))
    if getattr(instance, "enable_custom_mem_pool", False):
        stack.enter_context(torch.cuda.use_mem_pool(instance.custom_mem_pool))
    return stack


def _add_dedup_scratch(wrapped, instance, kwargs) -> None:
    import torch

    d = int(kwargs["speculative_num_draft_tokens"])
    cache_params = kwargs["cache_params"]
    rows = int(kwargs["spec_state_size"]) + 1
    old = instance.mamba_cache
    if dataclasses.is_dataclass(old) and isinstance(old, getattr(instance, "SpeculativeState", ())):
        raise RuntimeError("sglang-mamba-dedup: MambaPool built a speculative state with draft tokens off")
    num_layers = int(old.temporal.shape[0])
    conv_shapes = [tuple(int(x) for x in cs) for cs in cache_params.shape.conv]
    with _alloc_context(wrapped, instance):
        intermediate_ssm = torch.zeros(
            (num_layers, rows, d, *tuple(int(x) for x in cache_params.shape.temporal)),
            dtype=cache_params.dtype.temporal,
            device=instance.device,
        )
        phys_list, views = [], []
        for cs in conv_shapes:
            phys, view = sizing.allocate(
                num_layers=num_layers,
                rows=rows,
                num_draft_tokens=d,
                conv_shape=cs,
                dtype=cache_params.dtype.conv,
                device=instance.device,
            )
            phys_list.append(phys)
            views.append(view)
    fields = {f.name: getattr(old, f.name) for f in dataclasses.fields(old)}
    fields.update(intermediate_ssm=intermediate_ssm, intermediate_conv_window=views)
    instance.mamba_cache = instance.SpeculativeState(**fields)
    instance._intermediate_conv_window_phys = phys_list

    physical, dense = sizing.nbytes(phys_list), sizing.nbytes(views)  # the views' logical size is the dense size
    ssm_bytes = sizing.nbytes(intermediate_ssm)
    instance.mem_usage = _mem_usage_bytes(instance.mamba_cache, physical) / GIB
    ps = state.pool_state(instance)
    ps.layout, ps.commit_ok = "ours", True
    STATE.live_backport_pools.add(instance)  # revert() keeps our commit while it lives
    k = gate.conv_kernel_of(cache_params)
    logger.info(
        f"sglang-mamba-dedup: Mamba speculative cache is allocated (deduplicated conv window, back-port). "
        f"max_mamba_cache_size: {instance.size}, intermediate_ssm_state_cache size: {ssm_bytes / GIB:.2f}GB "
        f"intermediate_conv_window_cache size: {physical / GIB:.2f}GB physical (dense would be {dense / GIB:.2f}GB, "
        f"ratio {physical / dense if dense else 0.0:.3f} = (D+K-2)/(D*(K-1)), D={d} K={k}); pool mem_usage "
        f"{instance.mem_usage:.2f}GB"
    )
    _record_dedup(instance, "ours", None, dense, physical, None, d, cache_params, len(conv_shapes))


def _phys_for(instance, index: int, view):
    phys_list = getattr(instance, "_intermediate_conv_window_phys", None)
    if isinstance(phys_list, (list, tuple)) and index < len(phys_list):
        return phys_list[index]
    # Releases that keep no handle on the buffer: rebuild it from the view's own strides.
    if view.dim() != 5:
        return None
    L, S, D, dim, win = view.shape
    s0, s1, _, s3, s4 = view.stride()
    return view.as_strided((L, S, dim, D + win - 1), (s0, s1, s3, s4), view.storage_offset())


def _takeover_init(wrapped, instance, kwargs):
    result = wrapped(**kwargs)
    d = kwargs.get("speculative_num_draft_tokens")
    ok, reason = _gate(instance, kwargs)
    cache = getattr(instance, "mamba_cache", None)
    windows = list(getattr(cache, "intermediate_conv_window", None) or [])
    if d is None or not windows:
        _keep_stock(instance, reason or "no conv-window scratch", kwargs, spec=False)
        return result
    phys_list = [_phys_for(instance, i, view) for i, view in enumerate(windows)]
    if any(sizing.dedup_problem(view, phys) for view, phys in zip(windows, phys_list)):
        why = reason or "upstream built a dense window"
        _refuse_if_strict(why)
        _keep_stock(instance, why, kwargs, spec=True)
        return result

    physical, dense = sizing.nbytes(phys_list), sizing.nbytes(windows)  # the views' logical size is the dense size
    expected = _mem_usage_bytes(cache, physical)
    reported = getattr(instance, "mem_usage", None)
    if reported is None or abs(reported * GIB - expected) > 1024:
        logger.info(
            "sglang-mamba-dedup: MambaPool.mem_usage %s GB corrected to the physical %.4f GB", reported, expected / GIB
        )
        instance.mem_usage = expected / GIB
    commit_problem = _commit_problem(instance, kwargs)
    ps = state.pool_state(instance)
    ps.layout, ps.commit_ok = "upstream", commit_problem is None
    note = None if ok else f"upstream dedups although our gate says no: {reason}"
    why_not = note or (f"our commit will not serve this pool: {commit_problem}" if commit_problem else None)
    if why_not:
        _refuse_if_strict(why_not)
        state.warn_once(
            f"takeover:{why_not}", "sglang-mamba-dedup: this MambaPool keeps SGLang's own commit (%s)", why_not
        )
    _record_dedup(
        instance, "upstream", note, dense, physical, commit_problem, d, kwargs.get("cache_params"), len(windows)
    )
    logger.info(
        "sglang-mamba-dedup: upstream deduplicated conv window verified (view aliases its physical buffer): "
        f"{physical / GIB:.2f}GB physical vs {dense / GIB:.2f}GB dense"
    )
    return result
