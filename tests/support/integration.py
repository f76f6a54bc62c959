"""Helpers for the integration tests: real SGLang pools and backends on CPU (or CUDA), the
speculative-decode simulation, and test-only stand-ins where SGLang hard-codes CUDA.

Test-only pieces, never used by the plugin itself:
  * ``SGLANG_MAMBA_DEDUP_ALLOW_CPU=1`` (set by the test modules) lets the gate accept a CPU pool;
  * :func:`cpu_stock_paths` lets SGLang's *stock* code run on CPU: 0.5.13 allocates the speculative
    scratch on the hard-coded device "cuda" (redirected to the pool's CPU device), and SGLang's scatter
    wrappers refuse CPU tensors (their ``x.is_cuda`` checks are widened to ``x.is_cuda or x.is_cpu``; the
    rest of SGLang's code runs verbatim, kernels under ``TRITON_INTERPRET=1``);
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import inspect
import os
import re
import textwrap
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from sglang_mamba_dedup import installed, report, state, versions
from sglang_mamba_dedup.offline import shapes
from sglang_mamba_dedup.offline.sglang_pool import (  # the package's one SGLang pool builder
    CudaToDeviceTorch,
    build_pool,
)
from sglang_mamba_dedup.patches import SWITCHED_FEATURES
from sglang_mamba_dedup.patches import commit as commit_patch
from sglang_mamba_dedup.planner import sglang_estimate
from tests.support.kernels import assert_bitwise_equal  # noqa: E402,F401  (one bitwise comparison for all tests)

SGLANG_VERSION = versions.installed_sglang_version()
BACKPORT = versions.mode_for(SGLANG_VERSION) == "backport"
NEW_LAYOUT = versions.in_range(SGLANG_VERSION, versions.NEW_LAYOUT)
#: The installed release's own dedup gate takes ``is_kda`` (0.5.17+): before that upstream dedups KDA and
#: opt-out shapes too (FACTS §1), read from the installed code, not from a version number.
UPSTREAM_GATE_KNOWS_KDA = False
if not BACKPORT:
    _gate_fn = getattr(importlib.import_module("sglang.srt.mem_cache.memory_pool"), "conv_window_dedup_enabled", None)
    if _gate_fn is None:
        _gate_fn = getattr(importlib.import_module("sglang.srt.utils"), "conv_window_dedup_enabled", None)
    UPSTREAM_GATE_KNOWS_KDA = _gate_fn is not None and len(inspect.signature(_gate_fn).parameters) >= 4
#: The installed release honours a model's ``disable_conv_window_dedup`` opt-out (read from its pool code).
UPSTREAM_KNOWS_OPT_OUT = not BACKPORT and "disable_conv_window_dedup" in inspect.getsource(
    importlib.import_module("sglang.srt.mem_cache.memory_pool")
)


def release_only(release_range: str, reason: str) -> list:
    """``pytestmark`` of a module that proves something of some releases only: CI's ``release`` selector, and a
    skip saying ``reason`` where the installed SGLang is outside ``release_range`` (a range of ``versions``)."""
    return [
        pytest.mark.release,
        pytest.mark.skipif(not versions.in_range(SGLANG_VERSION, release_range), reason=reason),
    ]


# ------------------------------------------------------------------------------------------------ plugin
@contextlib.contextmanager
def plugin(on: bool, mode: str = "1"):
    """Plugin applied (``on``) or fully reverted, with the switch env var set accordingly."""
    old = os.environ.get("SGLANG_MAMBA_DEDUP")
    report.clear_events()
    try:
        if on:
            os.environ["SGLANG_MAMBA_DEDUP"] = mode
            res = installed.apply(SWITCHED_FEATURES)
            bad = {f: r for f, r in res.items() if r is not None}
            assert not bad, f"plugin features skipped: {bad}"
        else:
            os.environ.pop("SGLANG_MAMBA_DEDUP", None)
            installed.revert(SWITCHED_FEATURES, force=True)
        yield
    finally:
        installed.revert(SWITCHED_FEATURES, force=True)
        if old is None:
            os.environ.pop("SGLANG_MAMBA_DEDUP", None)
        else:
            os.environ["SGLANG_MAMBA_DEDUP"] = old


def ensure_commit_kernel() -> str:
    """The plugin's Triton commit must import: these tests exercise it, never a stand-in."""
    problem = commit_patch.kernel_problem()
    assert problem is None, f"the plugin's commit kernel does not import: {problem}"
    return "triton"


# ------------------------------------------------------------------------------------------------ SGLang
def mem_pool_module():
    return importlib.import_module("sglang.srt.mem_cache.memory_pool")


def backend_module():
    return importlib.import_module("sglang.srt.layers.attention.hybrid_linear_attn_backend")


def scatter_module():
    name = (
        "sglang.kernels.ops.mamba.mamba_state_scatter_triton"
        if NEW_LAYOUT
        else "sglang.srt.layers.attention.mamba.mamba_state_scatter_triton"
    )
    return importlib.import_module(name)


def causal_conv1d_update():
    name = (
        "sglang.kernels.ops.mamba.causal_conv1d_triton"
        if NEW_LAYOUT
        else "sglang.srt.layers.attention.mamba.causal_conv1d_triton"
    )
    return importlib.import_module(name).causal_conv1d_update


def make_cache_params(
    *,
    num_layers: int,
    conv_dim: int,
    conv_kernel: int,
    num_heads: int,
    head_dim: int,
    state_size: int,
    conv_dtype=torch.bfloat16,
    ssm_dtype=torch.float32,
    opt_out: bool = False,
):
    mu = importlib.import_module("sglang.srt.configs.mamba_utils")
    fields = {f.name for f in dataclasses.fields(mu.Mamba2StateShape)}
    kw = dict(
        conv=[(conv_dim, conv_kernel - 1)],
        temporal=(num_heads, head_dim, state_size),
        intermediate_size=num_heads * head_dim,
        conv_dim=conv_dim,
        ssm_state_size=state_size,
        num_heads=num_heads,
        head_dim=head_dim,
        state_size=state_size,
        conv_kernel=conv_kernel,
    )
    shape_cls = mu.Mamba2StateShape
    if opt_out:
        if "disable_conv_window_dedup" in fields:
            kw["disable_conv_window_dedup"] = True
        else:  # 0.5.13: no field yet; a model class that opts out the way 0.5.17+ spells it
            shape_cls = dataclasses.make_dataclass(
                "OptOutStateShape",
                [("disable_conv_window_dedup", bool, dataclasses.field(default=True))],
                bases=(mu.Mamba2StateShape,),
                frozen=True,
                kw_only=True,
            )
    shape = shape_cls(**{k: v for k, v in kw.items() if k in fields or k == "disable_conv_window_dedup"})
    return mu.Mamba2CacheParams(
        shape=shape,
        layers=list(range(num_layers)),
        dtype=mu.Mamba2StateDType(conv=conv_dtype, temporal=ssm_dtype),
    )


def _widen_is_cuda(fn):
    """A copy of SGLang function ``fn`` whose ``x.is_cuda`` checks also accept CPU tensors (tests only)."""
    fn = getattr(fn, "__wrapped_sglang__", fn)
    src = textwrap.dedent(inspect.getsource(fn))
    new = re.sub(r"(\b\w+)\.is_cuda\b", r"(\1.is_cuda or \1.is_cpu)", src)
    ns: dict[str, Any] = {}
    exec(compile(new, inspect.getsourcefile(fn) or "<sglang>", "exec"), fn.__globals__, ns)
    out = ns[fn.__name__]
    out.__wrapped_sglang__ = fn
    return out


_SCATTER_NAMES = (
    "fused_mamba_state_scatter_with_mask",
    "fused_conv_window_scatter_with_mask",
    "scatter_mamba_states_after_mtp_verify",
)


@contextlib.contextmanager
def cpu_stock_paths(device: str = "cpu"):
    """Let SGLang's stock pool and scatter run on ``device`` (cpu) in tests; a no-op on CUDA.

    Every release: ``memory_pool``'s ``torch.zeros(device="cuda")`` (0.5.12 ... 0.5.19 allocate the
    speculative scratch there) goes to ``device``; SGLang's scatter wrappers, wherever the installed
    release defines or imports them (scatter module and backend module), get their ``is_cuda`` checks widened.
    """
    if torch.device(device).type == "cuda":
        yield
        return
    saved: list[tuple[Any, str, Any]] = []

    def swap(mod, name, value):
        saved.append((mod, name, getattr(mod, name)))
        setattr(mod, name, value)

    try:
        swap(mem_pool_module(), "torch", CudaToDeviceTorch(device))
        for mod in (scatter_module(), backend_module()):
            for name in _SCATTER_NAMES:
                fn = getattr(mod, name, None)
                if inspect.isfunction(fn):
                    swap(mod, name, _widen_is_cuda(fn))
        yield
    finally:
        for mod, name, value in reversed(saved):
            setattr(mod, name, value)


_published: dict[str, Any] = {}
SPEC_ALGORITHM = sglang_estimate.SPEC_ALGORITHM


def publish_server_args(topk: int = 1, draft_tokens: int = 4) -> None:
    """0.5.17+: the backends read the runtime context; publish a matching ServerArgs once."""
    if not NEW_LAYOUT or _published.get("key") == (topk, draft_tokens):
        return
    from sglang.srt.runtime_context import get_context
    from sglang.srt.server_args import ServerArgs

    sa = ServerArgs(
        model_path="dummy",
        speculative_algorithm=SPEC_ALGORITHM,
        speculative_eagle_topk=topk,
        speculative_num_steps=draft_tokens - 1,
        speculative_num_draft_tokens=draft_tokens,
        max_running_requests=64,
        disable_radix_cache=True,
    )
    get_context().set_server_args(sa)
    _published["key"] = (topk, draft_tokens)


class _FullAttnStub:
    """The full-attention half of the hybrid backend; the commit never touches it."""

    token_to_kv_pool = None
    kv_index_translator = None
    needs_cpu_seq_lens = False
    use_captured_forward_metadata_for_breakable_cuda_graph = False

    def __init__(self, req_to_token_pool):
        self.req_to_token_pool = req_to_token_pool


def build_backend(req_to_token_pool, *, device: str, topk: int = 1, draft_tokens: int = 4):
    """A real ``HybridLinearAttnBackend`` over a real ``MambaAttnBackendBase``, set up by their own constructors."""
    publish_server_args(topk, draft_tokens)
    bk = backend_module()
    runner = types.SimpleNamespace(
        device=device,
        server_args=types.SimpleNamespace(speculative_eagle_topk=topk, enable_mis=False, enable_unified_memory=False),
        is_draft_worker=False,
        req_to_token_pool=req_to_token_pool,
        token_to_kv_pool=None,
        model_config=None,
    )
    lab = bk.MambaAttnBackendBase(runner)
    full = _FullAttnStub(req_to_token_pool)
    return bk.HybridLinearAttnBackend(full, lab, [])


def set_forward_metadata(backend, slots: torch.Tensor, draft_tokens: int) -> None:
    meta_mod = importlib.import_module("sglang.srt.layers.attention.mamba.mamba2_metadata")
    bs = slots.shape[0]
    backend.linear_attn_backend.forward_metadata = meta_mod.ForwardMetadata(
        query_start_loc=torch.arange(0, (bs + 1) * draft_tokens, draft_tokens, dtype=torch.int32, device=slots.device),
        mamba_cache_indices=slots,
        is_target_verify=True,
        draft_token_num=draft_tokens,
    )


# ------------------------------------------------------------------------------------------------ checks
def md5(tensors: Sequence[torch.Tensor]) -> str:
    h = hashlib.md5()
    for t in tensors:
        h.update(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ simulation
@dataclass
class SimConfig:
    num_layers: int = 2
    conv_dim: int = 40
    conv_kernel: int = 4
    num_heads: int = 2
    head_dim: int = 4
    state_size: int = 8
    draft_tokens: int = 4
    batch: int = 3
    steps: int = 32
    seed: int = 1234
    device: str = "cpu"
    #: fp32 on CPU: under TRITON_INTERPRET SGLang's causal_conv1d_update returns garbage *outputs* for bf16
    #: (its windows and states are right); on CUDA use SGLang's default bf16.
    conv_dtype: torch.dtype = torch.float32
    ssm_dtype: torch.dtype = torch.float32
    #: Compare the conv outputs too (off for bf16 under the interpreter, see above).
    check_outputs: bool = True
    #: The topk the *pool* is told (2 gives SGLang's dense window); the draft itself is always a chain.
    pool_topk: int = 1
    progress: bool = False


@dataclass
class SimResult:
    step_md5s: list[str] = field(default_factory=list)
    windows: list[torch.Tensor] = field(default_factory=list)
    windows_md5: str = ""
    outputs_md5: str = ""
    final_md5: str = ""
    final: list[torch.Tensor] = field(default_factory=list)
    outputs: list[torch.Tensor] = field(default_factory=list)
    layout: str | None = None
    accept_lens: list[list[int]] = field(default_factory=list)
    #: Per step and request row, what the commit left in the row's slot, read back from the pool and
    #: compared with torch.equal: the draft step ``t`` whose window *and* SSM state it now holds, -1 if it
    #: kept its state from before the commit, -2 if neither (a corrupted state).
    slot_steps: list[list[int]] = field(default_factory=list)
    #: The persistent states before the first step (SGLang's pool zeroes them; the simulation fills them).
    initial: list[torch.Tensor] = field(default_factory=list)
    events: dict[str, Any] = field(default_factory=dict)


def _slot_steps(cache, slot_ids, win, ssm_steps, before) -> list[int]:
    """See :attr:`SimResult.slot_steps` (an independent read-back of what the commit wrote)."""
    after = [c[:, slot_ids] for c in cache.conv] + [cache.temporal[:, slot_ids]]
    found = []
    for r in range(slot_ids.shape[0]):
        got = -2
        for t in range(ssm_steps.shape[2]):
            want = [w[:, r, t] for w in win] + [ssm_steps[:, r, t]]
            if all(torch.equal(a[:, r], x) for a, x in zip(after, want)):
                got = t
                break
        if got == -2 and all(torch.equal(a[:, r], x[:, r]) for a, x in zip(after, before)):
            got = -1
        found.append(got)
    return found


def simulate(cfg: SimConfig) -> SimResult:
    """A multi-step speculative decode through real SGLang components.

    Per step: random draft inputs; SGLang's Triton ``causal_conv1d_update`` (the verify writer) runs every
    layer with the pool's window scratch and per-request slots, writing the draft windows; a deterministic
    stand-in for the SSM verify kernel writes ``intermediate_ssm`` from the committed SSM state; random
    accepted lengths (0 = row skipped, ``D`` = all accepted, partial in between) and, on some steps, track
    slots go through the real ``HybridLinearAttnBackend.update_mamba_state_after_mtp_verify``.
    Returns the per-step conv outputs and the final states (conv + SSM of every slot).
    """
    dev = torch.device(cfg.device)
    d, k = cfg.draft_tokens, cfg.conv_kernel
    cp = make_cache_params(
        num_layers=cfg.num_layers,
        conv_dim=cfg.conv_dim,
        conv_kernel=k,
        num_heads=cfg.num_heads,
        head_dim=cfg.head_dim,
        state_size=cfg.state_size,
        conv_dtype=cfg.conv_dtype,
        ssm_dtype=cfg.ssm_dtype,
    )
    b = cfg.batch
    mamba_size = 3 * b + 2
    pool = build_pool(
        cache_params=cp, size=b, mamba_size=mamba_size, draft_tokens=d, topk=cfg.pool_topk, device=cfg.device
    )
    backend = build_backend(pool, device=cfg.device, topk=1, draft_tokens=d)
    mp = pool.mamba_pool
    cache = mp.mamba_cache
    conv1d_update = causal_conv1d_update()

    g = torch.Generator().manual_seed(cfg.seed)  # small integer draws (host)
    gd = torch.Generator(device=dev).manual_seed(cfg.seed) if dev.type == "cuda" else g  # tensors, on device

    def rnd(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=gd, device=dev).to(dtype)

    # Initial persistent states (SGLang zeroes them; give them content so the commit matters).
    for c in cache.conv:
        c.copy_(rnd(*c.shape, dtype=c.dtype))
    cache.temporal.copy_(rnd(*cache.temporal.shape, dtype=cache.temporal.dtype))
    initial = [c.clone() for c in cache.conv] + [cache.temporal.clone()]
    weights = [rnd(cfg.conv_dim, k, dtype=cfg.conv_dtype) for _ in range(cfg.num_layers)]
    biases = [rnd(cfg.conv_dim, dtype=cfg.conv_dtype) for _ in range(cfg.num_layers)]
    perm = torch.randperm(mamba_size, generator=g)[: 2 * b] + 1
    slots = perm[:b].to(torch.int32).to(dev)
    track_slots_all = perm[b:].to(torch.int64).to(dev)
    inter_rows = torch.arange(b, dtype=torch.int32, device=dev)
    set_forward_metadata(backend, slots, d)

    update = getattr(
        type(backend).update_mamba_state_after_mtp_verify,
        "__wrapped__",
        type(backend).update_mamba_state_after_mtp_verify,
    )
    takes_req_pool_indices = "req_pool_indices" in inspect.signature(update).parameters
    req_pool_indices = torch.arange(b, dtype=torch.int64, device=dev)
    res = SimResult(layout=getattr(state.pool_state_of(mp), "layout", None))
    outs_all: list[torch.Tensor] = []
    for step in range(cfg.steps):
        x_all = rnd(cfg.num_layers, b, cfg.conv_dim, d, dtype=cfg.conv_dtype)
        outs = []
        for layer in range(cfg.num_layers):
            out = conv1d_update(
                x_all[layer],
                cache.conv[0][layer],
                weights[layer],
                biases[layer],
                "silu",
                conv_state_indices=slots,
                intermediate_conv_window=cache.intermediate_conv_window[0][layer],
                intermediate_state_indices=inter_rows,
            )
            outs.append(out)
        # SSM verify stand-in: per-step states derived from the committed state (deterministic torch).
        base = cache.temporal[:, slots.long()]  # [L, B, *ssm]
        incr = rnd(cfg.num_layers, b, d, *cache.temporal.shape[2:], dtype=cache.temporal.dtype)
        cache.intermediate_ssm[:, :b] = base.unsqueeze(2) * 0.5 + incr.cumsum(2)
        # Accepted lengths: 0 (skip row), partial, and full; force each kind to appear early.
        acc = torch.randint(0, d + 1, (b,), generator=g)
        if step < 3:
            acc[0] = (0, d, 1)[step]
            if b > 1:
                acc[1] = max(1, d // 2)  # partial acceptance from the first step on
        last_correct = (acc - 1).to(torch.int64).to(dev)
        track_idx = track_steps = None
        if step % 3 == 1:
            track_idx = track_slots_all[torch.randperm(b, generator=g)]
            ts = torch.randint(-1, d, (b,), generator=g)
            track_steps = ts.to(torch.int64).to(dev)
        # What verify wrote, read through the pool's logical window view (dense or deduplicated).
        win = torch.stack([w[:, :b].clone() for w in cache.intermediate_conv_window])
        # Called the way SGLang's workers call it (keywords; 0.5.17+ also pass req_pool_indices).
        call = dict(
            last_correct_step_indices=last_correct,
            mamba_track_indices=track_idx,
            mamba_steps_to_track=track_steps,
            model=None,
        )
        if takes_req_pool_indices:
            call["req_pool_indices"] = req_pool_indices
        slot_ids = slots.long()
        before = [c[:, slot_ids].clone() for c in cache.conv] + [cache.temporal[:, slot_ids].clone()]
        ssm_steps = cache.intermediate_ssm[:, :b].clone()
        backend.update_mamba_state_after_mtp_verify(**call)
        res.slot_steps.append(_slot_steps(cache, slot_ids, win, ssm_steps, before))
        if cfg.progress and step < 2:
            print(f"  sim step {step} done", flush=True)
        step_out = torch.stack(outs) if cfg.check_outputs else torch.zeros(0, device=dev)
        outs_all.append(step_out.clone())
        res.windows.append(win)
        res.step_md5s.append(md5([step_out, win]))
        res.accept_lens.append(acc.tolist())
    if dev.type == "cuda":
        torch.cuda.synchronize()
    res.outputs = outs_all
    res.final = [c.clone() for c in cache.conv] + [cache.temporal.clone()]
    res.initial = initial
    res.outputs_md5 = md5(outs_all)
    res.windows_md5 = md5(res.windows)
    res.final_md5 = md5(res.final)
    res.events = report.events()
    return res


# ------------------------------------------------------------------------------------------------ estimator
#: ``make_cache_params`` / ``SimConfig`` keywords of the models' state, from the one table in ``sglang_mamba_dedup.offline.shapes``.
QWEN35_08B = shapes.QWEN35_08B.state_dims()
QWEN3_NEXT_80B = shapes.QWEN3_NEXT_80B.state_dims()


def run_estimator(
    cache_params,
    *,
    total_rest_gb: float,
    draft_tokens: int = 4,
    topk: int = 1,
    max_running_requests: int = 256,
    device: str = "cuda",
    replayssm: bool = False,
) -> tuple[int, float]:
    """``(max_mamba_cache_size, rest_memory_gb)`` of SGLang's real estimator for a ``total_rest_gb`` budget,
    radix cache on (the package's runner, :mod:`sglang_mamba_dedup.planner.sglang_estimate`)."""
    _published.pop("key", None)
    est = sglang_estimate.run(
        cache_params,
        total_rest_gb=total_rest_gb,
        draft_tokens=draft_tokens,
        topk=topk,
        max_running_requests=max_running_requests,
        device=device,
        replayssm=replayssm,
        gdn=replayssm,
    )
    return est.slots, est.rest_gb
