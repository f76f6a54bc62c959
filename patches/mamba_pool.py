"""The conv-window scratch layout of ``MambaPool``.

Wraps ``sglang.srt.mem_cache.memory_pool.MambaPool.__init__`` (0.5.12 ... 0.5.23).

Back-port (0.5.12 ... 0.5.13.post1, no upstream dedup), when the gate passes
---------------------------------------------------------------------------
The dense ``[L, S+1, D, dim, K-1]`` window must never be allocated, not even for a moment. We do not
copy SGLang's constructor and we do not intercept ``torch.zeros``. Instead we call the original
``__init__`` with ``speculative_num_draft_tokens=None``: that is SGLang's own non-speculative path,
which allocates exactly the persistent conv and SSM states (and sets every attribute, the memory-saver
adapter and the custom memory pool included) and no speculative scratch at all. We then allocate the
speculative scratch ourselves, inside the *same* memory-saver region (``GPU_MEMORY_TYPE_KV_CACHE``)
and custom-memory-pool context the original uses, read from the instance it just set up:

  * ``intermediate_ssm [L, S+1, D, *ssm]`` exactly as SGLang would (same shape and dtype);
  * per conv kind one physical ``[L, S+1, dim, D+K-2]`` buffer and its overlapping view
    (:mod:`sglang_mamba_dedup.sizing`), kept in ``_intermediate_conv_window_phys`` as upstream names it;

and swap ``mamba_cache`` for a ``SpeculativeState`` holding them. So the peak during construction is the
final footprint, ``mem_usage`` counts physical bytes, and our log line reports them.

Take-over (0.5.14 ... 0.5.23, upstream dedup)
---------------------------------------------
The original runs unchanged (nothing is allocated twice). Afterwards we check that every
``intermediate_conv_window`` is the overlapping view of its physical buffer (address math), correct
``mem_usage`` if it counted the view's logical size, and record ``upstream`` (or ``stock`` with the
reason when upstream built the dense window).

Either way a gate 'no' keeps SGLang's stock layout, logs and records the reason, and in strict mode
(``SGLANG_MAMBA_DEDUP=strict``) raises a RuntimeError instead. The pool is tagged with ``_smd_layout``
and ``_smd_commit_ok`` (whether our commit kernel may serve it) for :mod:`.verify_commit`.
Undone by ``sglang_mamba_dedup.revert()`` (restores the original ``__init__``; pools already built keep
their layout).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
from typing import Any

from sglang_mamba_dedup import gate, ledger, report, sizing, state, versions
from sglang_mamba_dedup.env import SWITCH
from sglang_mamba_dedup.state import STATE

from . import verify_commit

logger = logging.getLogger("sglang_mamba_dedup")

GB = sizing.GIB

_sglang_version = versions.sglang_version


def _is_backport() -> bool:
    return versions.mode_for(_sglang_version()) == "backport"


_warn_once = state.warn_once


def _normalise_call(wrapped, instance, args, kwargs):
    """``(bound_init, instance, kwargs)`` for however the constructor was reached, or None.

    SGLang calls ``MambaPool.__init__`` with keywords on the instance. Another plugin may call the class
    attribute directly (``MambaPool.__dict__['__init__'](self, ...)``: wrapt then passes no instance and
    ``self`` first in ``args``) or pass arguments positionally: bind them to the original signature."""
    call_args = tuple(args)
    if instance is None:
        if not call_args:
            return None
        instance, call_args = call_args[0], call_args[1:]
        func = wrapped
        if not hasattr(instance, "__dict__"):
            return None

        def bound(**kw):
            return func(instance, **kw)

    else:
        bound = wrapped
    if call_args:
        try:
            sig = inspect.signature(getattr(wrapped, "__func__", wrapped))
            params = list(sig.parameters)
            if params and params[0] == "self":
                params = params[1:]
            ba = dict(zip(params, call_args))
            if len(ba) != len(call_args) or set(ba) & set(kwargs):
                return None
            kwargs = {**ba, **kwargs}
        except (TypeError, ValueError):
            return None
    return bound, instance, dict(kwargs)


def mamba_pool_init(wrapped, instance, args, kwargs):
    norm = _normalise_call(wrapped, instance, args, kwargs)
    if norm is None:
        reason = "MambaPool.__init__ was called in a form the plugin cannot read (no instance or unknown arguments)"
        _refuse_if_strict(reason)
        _warn_once("odd_call", "sglang-mamba-dedup: %s; this pool keeps SGLang's stock layout", reason)
        report.record_layout("stock", reason, 0, 0, release=_sglang_version())
        return wrapped(*args, **kwargs)
    bound, instance, kwargs = norm
    result = _backport_init(bound, instance, kwargs) if _is_backport() else _takeover_init(bound, instance, kwargs)
    _record_ledger(instance)
    return result


def _record_ledger(instance) -> None:
    """What the pool really holds, next to the estimator's reservation (:mod:`sglang_mamba_dedup.ledger`);
    the state's ``mem_usage_bytes()`` then reports physical bytes."""
    try:
        doc = ledger.build(instance)
        _physical_mem_usage_bytes(instance)
    except Exception as exc:  # noqa: BLE001 - bookkeeping must never break a pool
        logger.debug("sglang-mamba-dedup: no memory ledger for this pool: %s", exc)
        return
    ledger.log(doc)
    report.record_ledger(doc)


def _physical_mem_usage_bytes(instance) -> None:
    """SGLang's ``State.mem_usage_bytes()`` sums every field's logical size, so it counts the deduplicated
    view as the dense window it stands for (``get_kv_size_bytes`` returns it). Give this pool's state an
    answer in physical bytes: each storage of its fields once (shapes are fixed once the pool is built)."""
    cache = getattr(instance, "mamba_cache", None)
    if cache is None or not callable(getattr(cache, "mem_usage_bytes", None)):
        return
    physical = ledger.state_bytes(cache)
    object.__setattr__(cache, "mem_usage_bytes", lambda: physical)  # the state dataclass is frozen


UNIFIED_REASON = (
    "UnifiedMambaPool (--enable-unified-memory) builds its own states with a dense conv-window scratch and "
    "never runs MambaPool.__init__; the plugin does not serve it (SGLang's layout and commit)"
)


def unified_mamba_pool_init(wrapped, instance, args, kwargs):
    """``UnifiedMambaPool.__init__`` (0.5.15+): not served, but said once, recorded, and refused in strict."""
    spec = kwargs.get("speculative_num_draft_tokens") is not None
    if spec:
        _refuse_if_strict(UNIFIED_REASON)
    result = wrapped(*args, **kwargs)
    target = instance if instance is not None else (args[0] if args else None)
    dense = 0
    try:
        dense = sizing.nbytes(target.mamba_cache.intermediate_conv_window) if spec else 0
    except Exception:  # noqa: BLE001 - report only
        dense = 0
    if target is not None:
        try:
            target._smd_layout = "stock"
            target._smd_commit_ok = False
        except AttributeError:
            pass
    report.record_layout(
        "stock",
        UNIFIED_REASON,
        dense,
        dense,
        release=_sglang_version(),
        draft_tokens=kwargs.get("speculative_num_draft_tokens"),
        commit="sglang",
        commit_reason=UNIFIED_REASON,
        pool="UnifiedMambaPool",
    )
    if spec:
        _warn_once("unified", "sglang-mamba-dedup: %s", UNIFIED_REASON)
    else:
        logger.info("sglang-mamba-dedup: %s (no speculative scratch: nothing to deduplicate)", UNIFIED_REASON)
    return result


# ---------------------------------------------------------------------------------------------- helpers
def _topk_for(kwargs) -> Any:
    if "speculative_eagle_topk" in kwargs:
        return kwargs["speculative_eagle_topk"]
    ctx = gate.pool_context()
    if ctx is not None:
        return ctx.topk
    # 0.5.14+ take the topk as a keyword defaulting to None (= 1, as upstream's own gate reads it);
    # 0.5.12 ... 0.5.13.post1 have no such parameter: unknown unless _init_pools published it.
    return gate._UNSET if _is_backport() else None


def _unified() -> bool:
    ctx = gate.pool_context()
    return bool(ctx.unified) if ctx is not None else False


def _dense_bytes(num_layers: int, rows: int, d: int, conv_shapes, itemsize: int) -> int:
    return sum(sizing.dense_window_bytes(num_layers, rows, d, cs, itemsize) for cs in conv_shapes)


def _gate(instance, kwargs, *, backport: bool = False):
    return gate.check(
        backport_problem=verify_commit.backport_problem() if backport else None,
        device=kwargs.get("device"),
        speculative_num_draft_tokens=kwargs.get("speculative_num_draft_tokens"),
        cache_params=kwargs.get("cache_params"),
        topk=_topk_for(kwargs),
        unified=_unified(),
        pool=instance,
    )


def _refuse_if_strict(reason: str) -> None:
    if state.is_strict():
        raise RuntimeError(
            f"sglang-mamba-dedup strict mode ({SWITCH}=strict): the deduplicated conv-window cache "
            f"cannot be used for this MambaPool: {reason}"
        )


def _record_stock(instance, reason: str, kwargs, *, spec: bool) -> None:
    cache_params = kwargs.get("cache_params")
    d = kwargs.get("speculative_num_draft_tokens")
    dense = 0
    if spec and cache_params is not None:
        try:
            dense = sizing.nbytes(instance.mamba_cache.intermediate_conv_window)
        except Exception:  # noqa: BLE001 - report only
            dense = 0
    instance._smd_layout = "stock"
    # SGLang's layout, SGLang's commit: our kernel serves only the deduplicated layouts it was checked on
    # (tree verify with topk > 1 has no GPU evidence for it), as the README's failure table says.
    instance._smd_commit_ok = False
    report.record_layout(
        "stock",
        reason,
        dense,
        dense,
        release=_sglang_version(),
        draft_tokens=d,
        commit="sglang",
        commit_reason="SGLang's stock layout keeps SGLang's commit",
    )
    if spec:
        logger.warning("sglang-mamba-dedup: MambaPool keeps SGLang's dense conv-window scratch: %s", reason)
    else:
        logger.info("sglang-mamba-dedup: MambaPool without speculative scratch: %s", reason)


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
    kernel = verify_commit.kernel_problem()
    if kernel:
        return f"the plugin's commit kernel is unavailable: {kernel}"
    return None


# ---------------------------------------------------------------------------------------------- back-port
def _backport_init(wrapped, instance, kwargs):
    d = kwargs.get("speculative_num_draft_tokens")
    ok, reason = _gate(instance, kwargs, backport=True)
    if not ok:
        spec = d is not None
        if spec:
            _refuse_if_strict(reason)
        result = wrapped(**kwargs)
        _record_stock(instance, reason, kwargs, spec=spec)
        return result

    # SGLang's own non-speculative construction: persistent states only, no scratch at all.
    result = wrapped(**dict(kwargs, speculative_num_draft_tokens=None))
    _add_dedup_scratch(wrapped, instance, kwargs)
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
    spec_rows = int(kwargs["spec_state_size"]) + 1
    state = instance.mamba_cache
    if dataclasses.is_dataclass(state) and isinstance(state, getattr(instance, "SpeculativeState", ())):
        raise RuntimeError("sglang-mamba-dedup: MambaPool built a speculative state with draft tokens off")
    conv: list[torch.Tensor] = list(state.conv)
    temporal: torch.Tensor = state.temporal
    num_layers = int(temporal.shape[0])
    conv_shapes = [tuple(int(x) for x in cs) for cs in cache_params.shape.conv]
    conv_dtype = cache_params.dtype.conv
    ssm_dtype = cache_params.dtype.temporal
    device = instance.device
    with _alloc_context(wrapped, instance):
        intermediate_ssm = torch.zeros(
            (num_layers, spec_rows, d, *tuple(int(x) for x in cache_params.shape.temporal)),
            dtype=ssm_dtype,
            device=device,
        )
        phys_list, views = [], []
        for cs in conv_shapes:
            phys, view = sizing.allocate(
                num_layers=num_layers,
                rows=spec_rows,
                num_draft_tokens=d,
                conv_shape=cs,
                dtype=conv_dtype,
                device=device,
            )
            phys_list.append(phys)
            views.append(view)
    fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    fields.update(intermediate_ssm=intermediate_ssm, intermediate_conv_window=views)
    instance.mamba_cache = instance.SpeculativeState(**fields)
    instance._intermediate_conv_window_phys = phys_list

    state_bytes = sizing.nbytes(conv) + sizing.nbytes(temporal)
    other = sum(
        sizing.nbytes(getattr(state, f.name))
        for f in dataclasses.fields(state)
        if f.name not in ("conv", "temporal") and isinstance(getattr(state, f.name), (torch.Tensor, list))
    )
    physical = sizing.nbytes(phys_list)
    dense = _dense_bytes(num_layers, spec_rows, d, conv_shapes, torch.empty((), dtype=conv_dtype).element_size())
    ssm_bytes = sizing.nbytes(intermediate_ssm)
    instance.mem_usage = (state_bytes + other + ssm_bytes + physical) / GB
    instance._smd_layout = "ours"
    instance._smd_commit_ok = True
    STATE.live_backport_pools.add(instance)  # revert() keeps our commit while it lives
    k = gate.conv_kernel_of(cache_params)
    logger.info(
        "sglang-mamba-dedup: Mamba speculative cache is allocated (deduplicated conv window, back-port). "
        "max_mamba_cache_size: %s, intermediate_ssm_state_cache size: %.2fGB "
        "intermediate_conv_window_cache size: %.2fGB physical (dense would be %.2fGB, ratio %.3f = (D+K-2)/(D*(K-1)), "
        "D=%d K=%d); pool mem_usage %.2fGB",
        instance.size,
        ssm_bytes / GB,
        physical / GB,
        dense / GB,
        physical / dense if dense else 0.0,
        d,
        k,
        instance.mem_usage,
    )
    report.record_layout(
        "ours",
        None,
        dense,
        physical,
        commit="ours",
        commit_reason=None,
        release=_sglang_version(),
        draft_tokens=d,
        conv_kernel=k,
        conv_kinds=len(conv_shapes),
        mem_usage_bytes=int(round(instance.mem_usage * GB)),
    )


# ---------------------------------------------------------------------------------------------- take-over
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
    cache_params = kwargs.get("cache_params")
    ok, reason = _gate(instance, kwargs)
    cache = getattr(instance, "mamba_cache", None)
    windows = list(getattr(cache, "intermediate_conv_window", None) or [])
    if d is None or not windows:
        _record_stock(instance, reason or "no conv-window scratch", kwargs, spec=False)
        return result
    problems = []
    phys_list = []
    for i, view in enumerate(windows):
        phys = _phys_for(instance, i, view)
        phys_list.append(phys)
        problem = sizing.dedup_problem(view, phys)
        if problem:
            problems.append(f"window {i}: {problem}")
    if problems:
        why = reason or "upstream built a dense window"
        _refuse_if_strict(why)
        _record_stock(instance, why, kwargs, spec=True)
        return result

    import torch

    physical = sizing.nbytes(phys_list)
    dense = sizing.nbytes(windows)  # the views' logical size is the dense size
    # mem_usage must count the physical buffers, not the views' logical size.
    expected = 0
    for f in dataclasses.fields(cache):
        v = getattr(cache, f.name)
        if f.name == "intermediate_conv_window":
            expected += physical
        elif isinstance(v, (torch.Tensor, list)):
            expected += sizing.nbytes(v)
    reported = getattr(instance, "mem_usage", None)
    if reported is None or abs(reported * GB - expected) > 1024:
        logger.info(
            "sglang-mamba-dedup: MambaPool.mem_usage %s GB corrected to the physical %.4f GB",
            reported,
            expected / GB,
        )
        instance.mem_usage = expected / GB
    instance._smd_layout = "upstream"
    commit_problem = _commit_problem(instance, kwargs)
    instance._smd_commit_ok = commit_problem is None
    note = None if ok else f"upstream dedups although our gate says no: {reason}"
    why_not = note or (f"our commit will not serve this pool: {commit_problem}" if commit_problem else None)
    if why_not:
        _refuse_if_strict(why_not)
        _warn_once(
            f"takeover:{why_not}",
            "sglang-mamba-dedup: this MambaPool keeps SGLang's own commit (%s)",
            why_not,
        )
    report.record_layout(
        "upstream",
        note,
        dense,
        physical,
        commit="ours" if commit_problem is None else "sglang",
        commit_reason=commit_problem,
        release=_sglang_version(),
        draft_tokens=d,
        conv_kernel=gate.conv_kernel_of(cache_params),
        conv_kinds=len(windows),
        mem_usage_bytes=int(round(instance.mem_usage * GB)),
    )
    logger.info(
        "sglang-mamba-dedup: upstream deduplicated conv window verified (view aliases its physical buffer): "
        "%.2fGB physical vs %.2fGB dense",
        physical / GB,
        dense / GB,
    )
    return result
