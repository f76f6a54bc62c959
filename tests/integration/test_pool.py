"""The pool patch on the real SGLang ``MambaPool`` / ``HybridReqToTokenPool`` (CPU; the gate's CUDA check
is overridden for tests only with ``SGLANG_MAMBA_DEDUP_ALLOW_CPU=1``), the gate's every 'no', strict mode,
topk plumbing, the PD decode pool and the estimator.

Back-port releases (0.5.13.post1): the plugin builds the deduplicated window itself; stock is dense.
Take-over releases (0.5.23): upstream builds it; the plugin verifies and records it.
"""

from __future__ import annotations

import importlib
import itertools
import math
import types

import pytest
import torch

from sglang_mamba_dedup import env, gate, installed, ledger, report, sizing, state
from sglang_mamba_dedup.offline import shapes
from sglang_mamba_dedup.patches import estimator as estimator_patch
from sglang_mamba_dedup.patches import topk_plumbing as topk_patch
from tests.support import integration as iu

pytestmark = [pytest.mark.release, pytest.mark.usefixtures("allow_cpu")]

GB = sizing.GIB


@pytest.fixture(autouse=True)
def _kernel():
    iu.ensure_commit_kernel()


@pytest.fixture(autouse=True)
def _cpu_paths():
    """0.5.12 ... 0.5.19 allocate SGLang's speculative scratch on a hard-coded "cuda": sent to the CPU here."""
    with iu.cpu_stock_paths():
        yield


def _cp(**kw):
    base = dict(num_layers=2, conv_dim=5, conv_kernel=4, num_heads=2, head_dim=3, state_size=4)
    base.update(kw)
    return iu.make_cache_params(**base)


def _pool(cp=None, *, draft_tokens=4, topk=1, size=3, mamba_size=5, **kw):
    return iu.build_pool(
        cache_params=cp or _cp(), size=size, mamba_size=mamba_size, draft_tokens=draft_tokens, topk=topk, **kw
    )


def _assert_dedup(mp, draft_tokens, conv_kernel):
    windows = mp.mamba_cache.intermediate_conv_window
    phys_list = mp._intermediate_conv_window_phys
    assert len(windows) == len(phys_list) >= 1
    for view, phys in zip(windows, phys_list):
        assert sizing.dedup_problem(view, phys) is None
        L, S, D, dim, win = view.shape
        assert (D, win) == (draft_tokens, conv_kernel - 1)
        assert tuple(phys.shape) == (L, S, dim, D + win - 1)
        # view[l,s,t,d,w] and phys[l,s,d,t+w] are the same memory, every index.
        for l, s, t, d, w in itertools.product(range(L), range(S), range(D), range(dim), range(win)):
            assert view[l, s, t, d, w].data_ptr() == phys[l, s, d, t + w].data_ptr()
        # A write through the view lands in the buffer.
        view[L - 1, S - 1, D - 1, dim - 1, win - 1] = 7.0
        assert float(phys[L - 1, S - 1, dim - 1, D + win - 2]) == 7.0
        view.zero_()
        # Physical bytes are exactly (D+K-2)/(D*(K-1)) of dense.
        dense = sizing.nbytes(view)
        assert sizing.nbytes(phys) * D * win == dense * (D + win - 1)
    # mem_usage counts physical bytes.
    c = mp.mamba_cache
    physical = (
        sizing.nbytes(c.conv) + sizing.nbytes(c.temporal) + sizing.nbytes(c.intermediate_ssm) + sizing.nbytes(phys_list)
    )
    assert abs(mp.mem_usage * GB - physical) < 1


# ------------------------------------------------------------------------------------------------ layout
@pytest.mark.parametrize("draft_tokens,conv_kernel", [(4, 4), (1, 4), (2, 2), (5, 3), (3, 5)], ids=lambda v: str(v))
def test_plugin_pool_is_deduplicated(draft_tokens, conv_kernel):
    with iu.plugin(True):
        calls0 = installed.PATCHER.calls("mamba_pool.init")
        pool = _pool(_cp(conv_kernel=conv_kernel), draft_tokens=draft_tokens)
        mp = pool.mamba_pool
        _assert_dedup(mp, draft_tokens, conv_kernel)
        ev = report.events()["dedup_layout"]
        assert ev["state"] == ("ours" if iu.BACKPORT else "upstream")
        assert ev["physical_bytes"] * draft_tokens * (conv_kernel - 1) == ev["dense_bytes"] * (
            draft_tokens + conv_kernel - 2
        )
        assert abs(ev["physical_bytes"] / ev["dense_bytes"] - sizing.ratio(draft_tokens, conv_kernel)) < 1e-12
        assert installed.PATCHER.calls("mamba_pool.init") == calls0 + 1


def test_dense_window_never_allocated(monkeypatch):
    """CPU stand-in for the GPU peak-memory check: no allocation of the dense window's shape at all."""
    shapes = []
    real_zeros = torch.zeros

    def spy(*args, **kwargs):
        t = real_zeros(*args, **kwargs)
        shapes.append(tuple(t.shape))
        return t

    cp = _cp()
    with iu.plugin(True):
        monkeypatch.setattr(torch, "zeros", spy)
        pool = _pool(cp, draft_tokens=4, size=3)
        monkeypatch.setattr(torch, "zeros", real_zeros)
    dense_shape = (2, 4, 4, 5, 3)  # [L, S+1, D, dim, K-1]
    assert dense_shape not in shapes, shapes  # back-port: by us; take-over: by SGLang itself
    if iu.BACKPORT:
        assert (2, 4, 5, 6) in shapes  # the physical [L, S+1, dim, D+K-2] buffer
    _assert_dedup(pool.mamba_pool, 4, 4)


def test_stock_pool_when_plugin_off():
    with iu.cpu_stock_paths(), iu.plugin(False):
        mp = _pool().mamba_pool
        assert getattr(state.pool_state_of(mp), "layout", None) is None
        w = mp.mamba_cache.intermediate_conv_window[0]
        if iu.BACKPORT:
            assert w.is_contiguous() and tuple(w.shape) == (2, 4, 4, 5, 3)


# ------------------------------------------------------------------------------------------------ gate 'no'
def _stock_case(name):
    """(pool kwargs, extra context, expected reason fragment) per gate 'no' path."""
    if name == "topk2":
        return dict(topk=2), None, "topk 2 > 1"
    if name == "cpu_without_override":
        return dict(), "no_cpu", "not CUDA"
    if name == "speculative_off":
        return dict(draft_tokens=None), None, "speculative decoding off"
    if name == "opt_out":
        return dict(cp=_cp(opt_out=True)), None, "opts out"
    if name == "kda":
        mu = importlib.import_module("sglang.srt.configs.mamba_utils")
        shape = mu.KimiLinearStateShape.create(tp_world_size=1, num_heads=2, head_dim=4, conv_kernel_size=4)
        cp = mu.KimiLinearCacheParams(
            shape=shape, layers=[0, 1], dtype=mu.Mamba2StateDType(conv=torch.float32, temporal=torch.float32)
        )
        return dict(cp=cp), None, "KDA"
    if name == "unified":
        return dict(unified=True), None, "unified memory"
    if name == "topk_unknown":
        return dict(via_init_pools=False), None, "topk unknown"
    if name == "commit_patch_inactive":
        return dict(), "no_commit", "commit patch is not active"
    raise KeyError(name)


STOCK_CASES = [
    "topk2",
    "cpu_without_override",
    "speculative_off",
    "opt_out",
    "kda",
    "unified",
    "topk_unknown",
    "commit_patch_inactive",
]


@pytest.mark.parametrize("case", STOCK_CASES)
def test_gate_no_gives_stock_layout_and_reason(case, monkeypatch):
    kw, extra, fragment = _stock_case(case)
    if not iu.BACKPORT and case in ("topk_unknown", "commit_patch_inactive", "unified"):
        pytest.skip(
            "back-port only: 0.5.14+ pass topk to the pool, need no commit patch, build unified pools elsewhere"
        )
    if extra == "no_cpu":
        monkeypatch.delenv(env.ALLOW_CPU)
    cp = kw.pop("cp", None)
    with iu.cpu_stock_paths(), iu.plugin(True):
        if extra == "no_commit":
            installed.revert(["commit"])
        pool = _pool(cp, **kw)
        mp = pool.mamba_pool
        ev = report.events()["dedup_layout"]
        upstream_dedups_anyway = (case == "kda" and not iu.UPSTREAM_GATE_KNOWS_KDA) or (
            case == "opt_out" and not iu.UPSTREAM_KNOWS_OPT_OUT
        )
        if not iu.BACKPORT and upstream_dedups_anyway:
            # 0.5.14 ... 0.5.15.post1 dedup KDA / opt-out shapes themselves: recorded, our commit stays out.
            assert ev["state"] == "upstream" and "upstream dedups although our gate says no" in ev["reason"], ev
            assert fragment in ev["reason"], ev
            assert state.pool_state(mp).commit_ok is False
        elif iu.BACKPORT or case in ("topk2", "opt_out", "kda", "speculative_off"):
            assert state.pool_state(mp).layout == "stock" and ev["state"] == "stock", ev
            assert fragment in ev["reason"], ev
            if kw.get("draft_tokens", 4) is not None:
                w = mp.mamba_cache.intermediate_conv_window[0]
                phys = getattr(mp, "_intermediate_conv_window_phys", None)
                assert w.is_contiguous(), "stock = SGLang's dense window"
                assert not phys or sizing.dedup_problem(w, phys[0]) is not None
        else:  # take-over, CPU without override: upstream still dedups on CPU (its gate excludes only NPU/CPU engine)
            assert ev["state"] == "upstream" and fragment in ev["reason"], ev


def test_gate_reasons_unit():
    cp = _cp()
    ok, why = gate.check(device="cpu", speculative_num_draft_tokens=4, cache_params=cp, topk=None)
    assert ok and why is None
    assert (
        "not (dim, K-1)"
        in gate.check(device="cpu", speculative_num_draft_tokens=4, cache_params=_cp_bad_window(), topk=1)[1]
    )
    unified_cls = type("UnifiedMambaPool", (), {})
    assert (
        "UnifiedMambaPool"
        in gate.check(device="cpu", speculative_num_draft_tokens=4, cache_params=cp, topk=1, pool=unified_cls())[1]
    )
    assert "ROCm" in _with_hip(lambda: gate.device_problem("cuda"))
    assert "unknown" in gate.check(device="cpu", speculative_num_draft_tokens=4, cache_params=cp)[1]


def _cp_bad_window():
    cp = _cp()
    import dataclasses

    return dataclasses.replace(cp, shape=dataclasses.replace(cp.shape, conv=[(5, 5)]))


def _with_hip(fn):
    old = torch.version.hip
    torch.version.hip = "6.0"
    try:
        return fn()
    finally:
        torch.version.hip = old


def test_strict_mode_raises_instead_of_stock():
    with iu.cpu_stock_paths(), iu.plugin(True, mode="strict"):
        with pytest.raises(RuntimeError, match="strict mode.*topk 2 > 1"):
            _pool(topk=2)
        # Non-speculative pools have nothing to deduplicate: not an error.
        _pool(draft_tokens=None)


# ------------------------------------------------------------------------------------------------ plumbing
@pytest.mark.skipif(
    not iu.BACKPORT, reason="topk plumbing exists only where MambaPool does not take the topk (<0.5.14)"
)
def test_topk_plumbing_through_init_pools(caplog):
    """The _init_pools wrapper publishes server_args.speculative_eagle_topk to the pool gate, however it is
    reached: SGLang's bound call, or the class attribute with self first (another plugin's wrapper around
    ours), which once read the topk from instance=None and gave a topk-3 pool the dedup layout."""
    import wrapt

    built = {}

    def fake_init_pools(self):  # stands in for SGLang's _init_pools body: builds the pool
        built["pool"] = iu.build_pool(
            cache_params=_cp(), size=2, mamba_size=4, draft_tokens=4, topk=None, via_init_pools=False
        )

    installed = wrapt.FunctionWrapper(fake_init_pools, topk_patch.init_pools)  # as the patcher wraps it
    for call in ("bound", "class attribute"):
        for topk, expect in ((1, "ours"), (3, "stock")):
            runner = types.SimpleNamespace(
                server_args=types.SimpleNamespace(speculative_eagle_topk=topk, enable_unified_memory=False)
            )
            with iu.cpu_stock_paths(), iu.plugin(True):
                if call == "bound":
                    installed.__get__(runner, type(runner))()
                else:
                    installed(runner)
                layout = state.pool_state(built["pool"].mamba_pool).layout
            assert layout == expect, (call, topk, layout, report.events())
    assert caplog.text.count("_init_pools was called through the class attribute") == 1

    # unreadable (no server_args anywhere): topk unknown -> SGLang's dense window; strict stops
    with iu.cpu_stock_paths(), iu.plugin(True):
        installed(object())
        assert state.pool_state(built["pool"].mamba_pool).layout == "stock"
    with iu.cpu_stock_paths(), iu.plugin(True, mode="strict"), pytest.raises(RuntimeError, match="topk unknown"):
        installed(object())


def test_patches_installed_where_expected():
    with iu.plugin(True):
        st = installed.status()
        applied = {n for n, v in st.items() if v["state"] == "applied"}
        assert {"mamba_pool.init", "hybrid_linear_attn.update_mamba_state_after_mtp_verify"} <= applied
        assert ("kv_cache_mixin.init_pools" in applied) == iu.BACKPORT
        assert ("kv_cache_configurator.handle_max_mamba_cache" in applied) == iu.NEW_LAYOUT
        # A second apply wraps nothing twice; one pool construction = one wrapper call.
        installed.apply(["dedup_layout", "commit", "topk_plumbing", "estimator"])
        calls0 = installed.PATCHER.calls("mamba_pool.init")
        _pool()
        assert installed.PATCHER.calls("mamba_pool.init") == calls0 + 1


def test_pd_decode_pool_gets_dedup():
    dec = importlib.import_module("sglang.srt.disaggregation.decode")
    import inspect

    sig = inspect.signature(dec.HybridMambaDecodeReqToTokenPool.__init__).parameters
    cp = _cp()
    kw = dict(
        size=2,
        max_context_len=64,
        device="cpu",
        enable_memory_saver=False,
        cache_params=cp,
        mamba_layer_ids=[0, 1],
        speculative_num_draft_tokens=4,
        enable_mamba_extra_buffer=False,
        pre_alloc_size=1,
        enable_overlap_schedule=True,
        mamba_size=4,
    )
    if "speculative_eagle_topk" in sig:
        kw["speculative_eagle_topk"] = 1
    with iu.plugin(True), gate.speculative_topk(1):  # what _init_pools publishes on 0.5.13
        pool = dec.HybridMambaDecodeReqToTokenPool(**kw)
    _assert_dedup(pool.mamba_pool, 4, 4)


# ------------------------------------------------------------------------------------------------ estimator
@pytest.mark.parametrize("model", ["qwen3.5-0.8b", "nemotron-h-8b-bf16"])
def test_estimator_reserves_dedup_size(model, capsys):
    """The estimator's effective draft count from the model's state bytes: GDN, and Mamba2 with head_dim !=
    state and a bf16 SSM state (Nemotron-H-8B)."""
    q = shapes.MODELS[model]
    ssm_dtype = getattr(torch, q.ssm_dtype)
    cp = iu.make_cache_params(**q.state_dims(), conv_dtype=torch.bfloat16, ssm_dtype=ssm_dtype)
    budget = 40.0
    with iu.plugin(False):
        before, rest_before = iu.run_estimator(cp, total_rest_gb=budget, device="cpu")
    with iu.plugin(True):
        after, rest_after = iu.run_estimator(cp, total_rest_gb=budget, device="cpu")
        est = ledger.last_estimate()
    assert est["applied"] and est["draft_tokens"] == 4
    d, k = 4, q.conv_kernel
    conv = q.gdn_layers * q.conv_dim * (k - 1) * 2  # bf16
    ssm = q.gdn_layers * math.prod(q.ssm_shape) * ssm_dtype.itemsize
    assert abs(est["effective_draft_tokens"] - (ssm * d + conv * (d + k - 2) / (k - 1)) / (ssm + conv)) < 1e-12
    assert after > before
    with iu.plugin(True):  # topk > 1: no change
        same, _ = iu.run_estimator(cp, total_rest_gb=budget, topk=2, device="cpu")
    assert same == before
    with capsys.disabled():
        print(
            f"\n[estimator sglang {iu.SGLANG_VERSION}] {q.name} shapes, {budget} GB rest budget, D=4, radix on: "
            f"max_mamba_cache_size {before} -> {after} (+{after - before}); rest for KV {rest_before:.3f} -> {rest_after:.3f} GB; "
            f"D_eff={est['effective_draft_tokens']:.4f}"
        )


def test_estimator_under_replayssm_reserves_the_conv_scratch(caplog):
    """With ReplaySSM spec verify SGLang (0.5.17+) reserves no per-draft scratch, yet the pool still allocates the
    conv-window scratch. The plugin keeps the slots and reserves exactly that scratch out of the KV cache's share
    (it once logged 'reserves the deduplicated scratch' while changing nothing: 1031 = 1031 slots)."""
    cp = iu.make_cache_params(**iu.QWEN35_08B, conv_dtype=torch.bfloat16)
    with iu.plugin(False):
        try:
            before, rest_before = iu.run_estimator(cp, total_rest_gb=40.0, device="cpu", replayssm=True)
        except ValueError as exc:  # no ReplaySSM in this release
            pytest.skip(str(exc))
    with iu.plugin(True), caplog.at_level("INFO", logger="sglang_mamba_dedup"):
        after, rest_after = iu.run_estimator(cp, total_rest_gb=40.0, device="cpu", replayssm=True)
        est = ledger.last_estimate()
    assert after == before
    if not est["replayssm"] or "does not price it" in (est["reason"] or ""):  # 0.5.16: left alone, ledger warns
        assert est["applied"] is False and rest_after == rest_before
        return
    rows = min(256, after // 3) + 1  # radix on: 3 slots per running request; +1 padding row
    conv_row = sizing.conv_window_physical_bytes(cp, 4)
    assert est["applied"] is True and est["top_up_bytes"] >= rows * conv_row, est
    assert est["top_up_bytes"] - rows * conv_row in (0, rows * estimator_patch.RING_CURSOR_BYTES), est
    assert abs((rest_before - rest_after) * (1 << 30) - est["top_up_bytes"]) < 1
    assert "reserves the deduplicated scratch" not in caplog.text
    assert "the conv-window scratch under ReplaySSM" in caplog.text


@pytest.mark.skipif(not iu.BACKPORT, reason="take-over releases allocate with SGLang's own code")
def test_backport_scratch_allocated_inside_sglang_memory_saver_region(monkeypatch):
    """Our scratch is allocated under the pool's own memory-saver region with SGLang's KV-cache tag."""
    mpm = iu.mem_pool_module()
    active = []
    tags = []

    class Adapter:
        @iu.contextlib.contextmanager
        def region(self, tag, *a, **k):
            tags.append(tag)
            active.append(tag)
            try:
                yield
            finally:
                active.pop()

    monkeypatch.setattr(mpm.TorchMemorySaverAdapter, "create", staticmethod(lambda enable=False: Adapter()))
    seen = {}
    real_zeros = torch.zeros

    def spy(*args, **kwargs):
        t = real_zeros(*args, **kwargs)
        seen[tuple(t.shape)] = list(active)
        return t

    with iu.plugin(True):
        monkeypatch.setattr(torch, "zeros", spy)
        _pool(draft_tokens=4, size=3)
        monkeypatch.setattr(torch, "zeros", real_zeros)
    from sglang.srt.constants import GPU_MEMORY_TYPE_KV_CACHE

    assert seen[(2, 4, 5, 6)] == [GPU_MEMORY_TYPE_KV_CACHE]  # physical window [L, S+1, dim, D+K-2]
    assert seen[(2, 4, 4, 2, 3, 4)] == [GPU_MEMORY_TYPE_KV_CACHE]  # intermediate SSM [L, S+1, D, *ssm]
    assert tags.count(GPU_MEMORY_TYPE_KV_CACHE) >= 2  # SGLang's own region, then ours
