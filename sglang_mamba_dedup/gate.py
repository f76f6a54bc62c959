"""The gate: may the conv-window scratch of this pool be deduplicated? Yes only when all hold:

  * the pool is on a CUDA device (not ROCm: untested here);
  * speculative decoding is on (the pool has a draft-window scratch at all);
  * the draft is a linear chain: EAGLE topk <= 1 (``None`` counts as 1; NGRAM puts its BFS breadth here);
  * every conv state is shaped ``(dim, K-1)`` (the window axis last);
  * not KDA (Kimi linear, ``(K-1, dim)`` conv, transposed windows) and the model did not opt out
    (``disable_conv_window_dedup`` on its state-shape class);
  * not ``UnifiedMambaPool`` (``--enable-unified-memory`` keeps a dense window);
  * on back-port releases (no upstream dedup) also: our commit patch is active and our kernels import,
    because SGLang's own scatter there refuses a non-contiguous (overlapping) source.

No torch/SGLang import at module load.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import env, sizing

_UNSET = object()


@dataclass(frozen=True)
class PoolContext:
    """What the model runner knows and the pool constructor does not (back-port releases)."""

    topk: int | None
    unified: bool = False


_POOL_CONTEXT: contextvars.ContextVar = contextvars.ContextVar("sglang_mamba_dedup_pool_context", default=None)


@contextlib.contextmanager
def speculative_topk(topk: int | None, *, unified: bool = False) -> Iterator[PoolContext]:
    """Publish the EAGLE topk (and unified-memory flag) to pools built inside this block."""
    ctx = PoolContext(topk=topk, unified=bool(unified))
    token = _POOL_CONTEXT.set(ctx)
    try:
        yield ctx
    finally:
        _POOL_CONTEXT.reset(token)


def pool_context() -> PoolContext | None:
    return _POOL_CONTEXT.get()


def device_problem(device: Any) -> str | None:
    import torch

    try:
        dev = torch.device(device)
    except Exception as exc:  # noqa: BLE001 - any unparsable device is a 'no'
        return f"unparsable device {device!r}: {exc}"
    if dev.type == "cuda":
        if getattr(torch.version, "hip", None):
            return "ROCm/HIP device: the plugin gates on CUDA only"
        return None
    if dev.type == "cpu" and env.enabled(env.ALLOW_CPU):  # tests only: the Triton interpreter stands in
        return None
    return f"device {dev.type!r} is not CUDA (the CPU override {env.ALLOW_CPU}=1 is for tests only)"


def conv_kernel_of(cache_params: Any) -> int | None:
    k = getattr(getattr(cache_params, "shape", None), "conv_kernel", None)
    return int(k) if k is not None else None


def model_problem(cache_params: Any) -> str | None:
    """Reasons that depend on the model's state shapes alone (KDA, opt-out, conv layout)."""
    shape = getattr(cache_params, "shape", None)
    if shape is None:
        return "cache_params has no state shape"
    if bool(getattr(cache_params, "is_kda", False)) or type(shape).__name__.startswith("KimiLinear"):
        return "KDA (Kimi linear) conv state is (K-1, dim) and its windows are transposed"
    if bool(getattr(shape, "disable_conv_window_dedup", False)):
        return f"the model opts out ({type(shape).__name__}.disable_conv_window_dedup)"
    k = conv_kernel_of(cache_params)
    if k is None or k < 2:
        return f"cannot read conv_kernel (>= 2) from {type(shape).__name__}"
    convs = list(getattr(shape, "conv", []) or [])
    if not convs:
        return "no conv state"
    for cs in convs:
        cs = tuple(int(x) for x in cs)
        if len(cs) != 2 or cs[1] != k - 1:
            return f"conv state shape {cs} is not (dim, K-1) with K-1={k - 1}"
    return None


def topk_problem(topk: Any) -> str | None:
    if topk is _UNSET:
        return (
            "speculative_eagle_topk unknown (pool built outside ModelRunner._init_pools and this release's "
            "MambaPool does not take it)"
        )
    t = 1 if topk is None else int(topk)
    if t > 1:
        return f"EAGLE topk {t} > 1: tree verify needs independent windows per node"
    return None


def check(
    *, device, speculative_num_draft_tokens, cache_params, topk=_UNSET, unified=False, pool=None, backport_problem=None
) -> tuple[bool, str | None]:
    """``(ok, reason)``. ``topk`` omitted = unknown (a 'no'). ``backport_problem``: on releases without upstream
    dedup, why the plugin's commit could not read a deduplicated view (the caller asks the patch layer)."""
    if speculative_num_draft_tokens is None:
        return False, "speculative decoding off (no conv-window scratch)"
    if int(speculative_num_draft_tokens) < 1:
        return False, f"speculative_num_draft_tokens={speculative_num_draft_tokens}"
    if pool is not None and type(pool).__name__.startswith("Unified"):
        return False, f"{type(pool).__name__} (--enable-unified-memory) keeps a dense window"
    if unified:
        return False, "unified memory (--enable-unified-memory) keeps a dense window"
    for problem in (device_problem(device), topk_problem(topk), model_problem(cache_params), backport_problem):
        if problem:
            return False, problem
    return True, None


def effective_draft_tokens(cache_params: Any, num_draft_tokens: int) -> float:
    """The draft-token count that makes SGLang's ``per_req * D_eff`` (``per_req = conv + ssm`` bytes, a dense
    window per draft token) equal the scratch the pool allocates per row: ``ssm * D + conv * (D+K-2)/(K-1)``."""
    if conv_kernel_of(cache_params) is None:
        raise ValueError("cache params without conv_kernel")
    row = sizing.request_bytes(cache_params, int(num_draft_tokens), dedup=True)
    return row.scratch / row.state
