"""Speculative-decode simulation through real SGLang components, stock vs plugin (>= 32 steps).

Real pool (``HybridReqToTokenPool`` / ``MambaPool``), real verify writer (SGLang's Triton
``causal_conv1d_update`` writing the draft windows), real ``HybridLinearAttnBackend
.update_mamba_state_after_mtp_verify`` on a backend built by SGLang's own constructors; random drafts,
random accepted lengths (0, partial and full), track slots on some steps. Stock and plugin runs must give
bit-identical per-step outputs, window contents and final conv + SSM states. On CPU the Triton kernels run
under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import pytest
import torch

from sglang_mamba_dedup import report, state
from tests.support import integration as iu

pytestmark = [pytest.mark.release, pytest.mark.usefixtures("allow_cpu")]


@pytest.fixture(scope="module")
def kernel_impl():
    return iu.ensure_commit_kernel()


def assert_commits_as_sglang_defines(run) -> None:
    """Each row with ``n`` accepted tokens holds step ``n - 1`` after the commit; ``n == 0`` keeps its state."""
    for step, (lens, got) in enumerate(zip(run.accept_lens, run.slot_steps)):
        want = [n - 1 if n > 0 else -1 for n in lens]
        assert got == want, f"step {step}: slots hold steps {got}, accepted lengths {lens} need {want}"


def acceptance_kinds(run, draft_tokens: int) -> set:
    """The kinds of acceptance whose commit was read back correctly from the pool."""
    kinds = set()
    for lens, got in zip(run.accept_lens, run.slot_steps):
        for n, t in zip(lens, got):
            if t == (n - 1 if n > 0 else -1):
                kinds.add("zero" if n == 0 else "full" if n == draft_tokens else "partial")
    return kinds


def _run(cfg, on: bool):
    with iu.cpu_stock_paths(cfg.device), iu.plugin(on):
        return iu.simulate(cfg)


def _compare(stock, ours, cfg):
    assert len(stock.step_md5s) == len(ours.step_md5s) == cfg.steps
    for i, (a, b) in enumerate(zip(stock.windows, ours.windows)):
        iu.assert_bitwise_equal(a, b, f"step {i} verify windows")
    if cfg.check_outputs:
        for i, (a, b) in enumerate(zip(stock.outputs, ours.outputs)):
            iu.assert_bitwise_equal(a, b, f"step {i} conv outputs")
    for i, (a, b) in enumerate(zip(stock.final, ours.final)):
        iu.assert_bitwise_equal(a, b, f"final state {i}")
    assert stock.step_md5s == ours.step_md5s


#: A Mamba2 (Nemotron-H) layer in small: SSM heads x head_dim x state with head_dim != state, conv dim
#: heads*head_dim + 2*groups*state (4*8 + 2*2*16 = 96), the SSM state in bf16 as Nemotron-H often keeps it.
MAMBA2_SMALL = dict(num_heads=4, head_dim=8, state_size=16, conv_dim=4 * 8 + 2 * 2 * 16, ssm_dtype=torch.bfloat16)


@pytest.mark.parametrize(
    "draft_tokens,conv_kernel,batch,conv_dtype,shape",
    [
        (4, 4, 3, torch.float32, {}),
        (3, 3, 2, torch.float32, {}),
        (4, 4, 3, torch.bfloat16, {}),
        (4, 4, 3, torch.float32, MAMBA2_SMALL),
    ],
    ids=["D4-K4-bs3-fp32", "D3-K3-bs2-fp32", "D4-K4-bs3-bf16", "mamba2-D4-K4-bs3-bf16ssm"],
)
def test_speculative_decode_simulation_stock_vs_plugin(
    kernel_impl, draft_tokens, conv_kernel, batch, conv_dtype, shape, capsys
):
    cfg = iu.SimConfig(
        draft_tokens=draft_tokens,
        conv_kernel=conv_kernel,
        batch=batch,
        steps=32,
        conv_dtype=conv_dtype,
        check_outputs=conv_dtype != torch.bfloat16,
        **shape,
    )
    stock = _run(cfg, on=False)
    ours = _run(cfg, on=True)

    # The plugin really ran: its layout in the pool and every commit through our kernel.
    assert ours.layout == ("ours" if iu.BACKPORT else "upstream")
    assert ours.events["dedup_layout"]["physical_bytes"] * draft_tokens * (conv_kernel - 1) == (
        ours.events["dedup_layout"]["dense_bytes"] * (draft_tokens + conv_kernel - 2)
    )
    assert ours.events["commit_calls"] == ours.events["ours_commit_calls"] == cfg.steps
    assert stock.layout is None and stock.events["ours_commit_calls"] == 0

    # What the commit wrote, read back from the pool: every accepted row's slot holds exactly the accepted
    # step's window and SSM state, every skipped row kept its state (stock and plugin alike).
    for run in (stock, ours):
        assert_commits_as_sglang_defines(run)
    # ... and zero, partial and full acceptance were all committed (read back, not the drawn lengths).
    assert acceptance_kinds(ours, draft_tokens) == {"zero", "partial", "full"}
    # The states moved: every final conv and SSM state differs from its initial content somewhere.
    for i, (a, b) in enumerate(zip(ours.initial, ours.final)):
        assert not torch.equal(a, b), f"state {i} never changed"

    _compare(stock, ours, cfg)
    with capsys.disabled():
        print(
            f"\n[commit-sim sglang {iu.SGLANG_VERSION} {kernel_impl} {cfg.device} D={draft_tokens} K={conv_kernel} "
            f"bs={batch} {str(conv_dtype).split('.')[-1]} steps={cfg.steps}] "
            f"stock: outputs {stock.outputs_md5 if cfg.check_outputs else 'not compared'} "
            f"windows {stock.windows_md5} final {stock.final_md5} | "
            f"plugin: outputs {ours.outputs_md5 if cfg.check_outputs else 'not compared'} "
            f"windows {ours.windows_md5} final {ours.final_md5}"
        )


# ------------------------------------------------------------------------------------------------------
# Branches SGLang keeps (chosen per call): the plugin must hand the call over unchanged.
def _small_backend():
    cp = iu.make_cache_params(num_layers=2, conv_dim=8, conv_kernel=4, num_heads=2, head_dim=4, state_size=4)
    pool = iu.build_pool(cache_params=cp, size=2, mamba_size=6, draft_tokens=4, topk=1)
    backend = iu.build_backend(pool, device="cpu", topk=1, draft_tokens=4)
    slots = torch.tensor([1, 2], dtype=torch.int32)
    iu.set_forward_metadata(backend, slots, 4)
    return pool, backend


def _recorder(calls, name):
    def rec(*args, **kwargs):
        calls.append(name)

    return rec


def test_our_path_commits_and_runs_ple(kernel_impl):
    """On our path SGLang's own PLE side-state commit (0.5.20+) runs, called the way the installed release
    defines it: the spy calls the real method (4 arguments in 0.5.20/0.5.21, 5 in 0.5.22+)."""
    with iu.cpu_stock_paths(), iu.plugin(True), pytest.MonkeyPatch.context() as monkeypatch:
        pool, backend = _small_backend()
        real = getattr(type(backend), "_update_ple_state_after_mtp_verify", None)
        calls = []
        if real is not None:

            def spy(*args, **kwargs):
                calls.append(len(args) + len(kwargs))
                return real(backend, *args, **kwargs)

            monkeypatch.setattr(backend, "_update_ple_state_after_mtp_verify", spy)
        backend.update_mamba_state_after_mtp_verify(torch.tensor([1, -1]), None, None, None)
        from sglang_mamba_dedup import report

        ev = report.events()
        assert ev["ours_commit_calls"] == 1 and ev["commit_calls"] == 1
        if real is not None:
            assert calls == [4], "SGLang's PLE side-state commit must still run on our path"


def _stock_commit_source():
    import inspect

    fn = iu.backend_module().HybridLinearAttnBackend.update_mamba_state_after_mtp_verify
    return inspect.getsource(getattr(fn, "__wrapped__", fn))


def _stock_scatter_name(bk):
    """The scatter the installed release's commit calls at module level (0.5.16+: one call; before: per kind)."""
    for name in ("scatter_mamba_states_after_mtp_verify", "fused_mamba_state_scatter_with_mask"):
        if name in _stock_commit_source() and hasattr(bk, name):
            return name
    pytest.fail("cannot find the stock commit's scatter in the installed release")


@pytest.mark.parametrize(
    "branch", ["kda_fused_accept", "replayssm_kda", "pp_stable_rows", "replayssm_spec_no_ssm", "unified_pool"]
)
def test_branches_we_do_not_own_stay_on_sglang(kernel_impl, branch):
    """Each branch is exercised on every release whose own commit has it (read from the installed code)."""
    import importlib
    import re

    from sglang_mamba_dedup import report

    bk = iu.backend_module()
    src = _stock_commit_source()
    # monkeypatches are undone inside cpu_stock_paths, before it restores what it swapped
    with iu.cpu_stock_paths(), iu.plugin(True), pytest.MonkeyPatch.context() as monkeypatch:
        pool, backend = _small_backend()
        calls = []
        args = (torch.tensor([1, 0]), None, None, None)
        kwargs = {}
        monkeypatch.setattr(backend, "_update_ple_state_after_mtp_verify", lambda *a, **k: None, raising=False)
        if branch == "kda_fused_accept":
            if "accept_lens_pool" not in src:
                pytest.skip(f"SGLang {iu.SGLANG_VERSION} has no KDA fused-accept branch")
            monkeypatch.setattr(bk, "fused_conv_window_scatter_with_mask", _recorder(calls, "sglang"))
            backend.linear_attn_backend.accept_lens_pool = torch.zeros(8, dtype=torch.int32)
        elif branch == "replayssm_kda":
            found = re.search(r"from (sglang\.[\w.]+kda_replayssm_spec_decode) import", src)
            if "replayssm_is_kda" not in src or not found:
                pytest.skip(f"SGLang {iu.SGLANG_VERSION} has no ReplaySSM-KDA branch")
            m = importlib.import_module(found.group(1))
            monkeypatch.setattr(m, "commit_kda_replayssm_after_verify", _recorder(calls, "sglang"))
            pool.mamba_pool.replayssm_is_kda = True
        elif branch == "pp_stable_rows":
            if not hasattr(bk, "pp_spec_stable_rows_enabled"):
                pytest.skip(f"SGLang {iu.SGLANG_VERSION} has no pipeline stable rows")
            monkeypatch.setattr(bk, "pp_spec_stable_rows_enabled", lambda: True)
            monkeypatch.setattr(bk, _stock_scatter_name(bk), _recorder(calls, "sglang"))
            kwargs["req_pool_indices"] = torch.tensor([0, 1])
        elif branch == "replayssm_spec_no_ssm":
            import dataclasses

            if "intermediate_ssm" not in inspect_fields(pool.mamba_pool.mamba_cache):
                pytest.skip("no intermediate_ssm field")
            monkeypatch.setattr(bk, _stock_scatter_name(bk), _recorder(calls, "sglang"))
            mp = pool.mamba_pool
            mp.mamba_cache = dataclasses.replace(mp.mamba_cache, intermediate_ssm=None)
        elif branch == "unified_pool":
            monkeypatch.setattr(bk, _stock_scatter_name(bk), _recorder(calls, "sglang"))
            state.pool_state(
                pool.mamba_pool
            ).commit_ok = False  # what the pool patch records for pools it did not build
        backend.update_mamba_state_after_mtp_verify(*args, **kwargs)
        ev = report.events()
        assert calls and set(calls) == {"sglang"}, f"{branch}: SGLang's own code must run"
        assert ev["commit_calls"] == 1 and ev["ours_commit_calls"] == 0


def inspect_fields(obj):
    import dataclasses

    return {f.name for f in dataclasses.fields(obj)}


def test_plugin_off_means_sglang_commit(kernel_impl):
    from sglang_mamba_dedup import report

    with iu.cpu_stock_paths(), iu.plugin(False):
        pool, backend = _small_backend()
        backend.update_mamba_state_after_mtp_verify(torch.tensor([1, 0]), None, None, None)
        assert report.events()["commit_calls"] == 0  # nothing of ours is wrapped


def test_route_decided_once_per_pool_and_plan_follows_moved_memory(kernel_impl):
    """The commit decides its route once per backend and pool (then reuses it and its launch plan), rebuilds
    the plan when a state tensor's memory moved in place, and the route when the backend got another pool;
    every commit lands where SGLang's would (checked against the source states)."""
    with iu.cpu_stock_paths(), iu.plugin(True):
        pool, backend = _small_backend()
        lab = backend.linear_attn_backend
        cache = lab.req_to_token_pool.mamba_pool.mamba_cache
        g = torch.Generator().manual_seed(0)
        steps = torch.tensor([1, 2])

        def commit_and_check(cache, what):
            cache.intermediate_ssm.copy_(torch.randn(cache.intermediate_ssm.shape, generator=g))
            backend.update_mamba_state_after_mtp_verify(steps, None, None, None)
            for r, slot in enumerate((1, 2)):
                assert torch.equal(cache.temporal[:, slot], cache.intermediate_ssm[:, r, int(steps[r])]), what

        commit_and_check(cache, "first commit")
        route = backend._smd_route
        plan = route.plan
        assert route.reason is None and plan is not None
        commit_and_check(cache, "second commit")
        assert backend._smd_route is route and route.plan is plan, "route and plan must be reused"

        old = cache.temporal.clone()
        cache.temporal.set_(torch.zeros_like(old))  # same tensor object, new memory
        commit_and_check(cache, "after the state memory moved")
        assert route.plan is not plan, "a plan holding the old pointers must not be reused"

        pool2, backend2 = _small_backend()
        lab.req_to_token_pool = backend2.linear_attn_backend.req_to_token_pool
        commit_and_check(lab.req_to_token_pool.mamba_pool.mamba_cache, "after the backend got another pool")
        assert backend._smd_route is not route, "a new pool must get a new route"


def test_commits_with_track_slots_are_counted(kernel_impl):
    """The status report counts commits with a track set apart (the e2e's proof that the prefix-cache path ran)."""
    from sglang_mamba_dedup import report

    with iu.cpu_stock_paths(), iu.plugin(True):
        pool, backend = _small_backend()
        backend.update_mamba_state_after_mtp_verify(torch.tensor([1, 2]), None, None, None)
        backend.update_mamba_state_after_mtp_verify(
            torch.tensor([1, 2]), torch.tensor([3, 4]), torch.tensor([0, -1]), None
        )
        ev = report.events()
        assert (ev["commit_calls"], ev["ours_commit_calls"]) == (2, 2), ev
        assert (ev["track_commit_calls"], ev["ours_track_commit_calls"]) == (1, 1), ev


def _check_slots_hold_steps(cache, slots, steps, what):
    for r, (s, sl) in enumerate(zip(steps.tolist(), slots)):
        for conv, win in zip(cache.conv, cache.intermediate_conv_window):
            assert torch.equal(conv[:, sl], win[:, r, s]), f"{what}: row {r} conv"
        assert torch.equal(cache.temporal[:, sl], cache.intermediate_ssm[:, r, s]), f"{what}: row {r} SSM"


def _slot_major(t):
    """Same memory and shape, strides of a slot-major layout: ``as_strided_`` keeps ``data_ptr``."""
    L, S = t.shape[:2]
    inner = t[0, 0].numel()
    strides = (inner, L * inner) + tuple(t.stride()[2:])
    t.as_strided_(t.shape, strides)


IN_PLACE = {
    "conv_as_strided_": lambda c, g: _slot_major(c.conv[0]),
    "temporal_as_strided_": lambda c, g: _slot_major(c.temporal),
    "window_set_": lambda c, g: c.intermediate_conv_window[0].set_(
        torch.randn(c.intermediate_conv_window[0].shape, generator=g).to(c.intermediate_conv_window[0].dtype)
    ),
    "conv_element_replaced": lambda c, g: c.conv.__setitem__(0, c.conv[0].clone()),
    "window_element_replaced": lambda c, g: c.intermediate_conv_window.__setitem__(
        0, torch.randn(c.intermediate_conv_window[0].shape, generator=g).to(c.intermediate_conv_window[0].dtype)
    ),
}


@pytest.mark.parametrize("change", list(IN_PLACE))
def test_in_place_layout_change_gets_a_fresh_plan(kernel_impl, change):
    """A state tensor changed in place keeping its data_ptr (as_strided_), moved (set_), or a list element
    replaced: the next commit must still land where SGLang's would. The plan was once keyed on pointers
    only, and every row came out wrong here."""
    g = torch.Generator().manual_seed(3)
    with iu.cpu_stock_paths(), iu.plugin(True):
        pool, backend = _small_backend()
        cache = pool.mamba_pool.mamba_cache
        steps = torch.tensor([1, 3])
        cache.intermediate_ssm.copy_(torch.randn(cache.intermediate_ssm.shape, generator=g))
        backend.update_mamba_state_after_mtp_verify(steps, None, None, None)
        _check_slots_hold_steps(cache, (1, 2), steps, "first commit")
        IN_PLACE[change](cache, g)
        for p in getattr(pool.mamba_pool, "_intermediate_conv_window_phys", None) or cache.intermediate_conv_window:
            p.copy_(torch.randn(p.shape, generator=g).to(p.dtype))
        cache.intermediate_ssm.copy_(torch.randn(cache.intermediate_ssm.shape, generator=g))
        backend.update_mamba_state_after_mtp_verify(steps, None, None, None)
        _check_slots_hold_steps(cache, (1, 2), steps, f"after {change}")
        assert report.events()["ours_commit_calls"] == 2


def test_commit_called_through_the_class_attribute_is_ours(kernel_impl, caplog):
    """Another plugin wraps the commit after ours and calls the class attribute with self first: wrapt then
    gives our wrapper no instance. It once fell through to SGLang (0.5.13.post1: 'src tensor must be
    contiguous' on our view; 0.5.23: silently SGLang's). Now our kernel serves it, with one WARNING."""
    bk = iu.backend_module()
    cls = bk.HybridLinearAttnBackend
    with iu.cpu_stock_paths(), iu.plugin(True), pytest.MonkeyPatch.context() as monkeypatch:
        ours = cls.__dict__["update_mamba_state_after_mtp_verify"]

        def foreign(self, *args, **kwargs):  # another plugin's plain wrapper, installed after ours
            return ours(self, *args, **kwargs)

        monkeypatch.setattr(cls, "update_mamba_state_after_mtp_verify", foreign)
        pool, backend = _small_backend()
        cache = pool.mamba_pool.mamba_cache
        g = torch.Generator().manual_seed(5)
        for steps in (torch.tensor([1, 3]), torch.tensor([2, 0])):
            cache.intermediate_ssm.copy_(torch.randn(cache.intermediate_ssm.shape, generator=g))
            backend.update_mamba_state_after_mtp_verify(steps, None, None, None)
            _check_slots_hold_steps(cache, (1, 2), steps, "class-attribute call")
        ev = report.events()
        assert (ev["commit_calls"], ev["ours_commit_calls"]) == (2, 2), ev
    assert caplog.text.count("verify commit was called through the class attribute") == 1


@pytest.mark.parametrize("topk", [2, "unknown"])
def test_stock_layout_pool_keeps_sglangs_commit(kernel_impl, topk):
    """A pool the gate kept on SGLang's dense layout (topk > 1; on the back-port also an unknown topk) is
    committed by SGLang, as the README says: our kernel serves only the deduplicated layouts."""
    if topk == "unknown" and not iu.BACKPORT:
        pytest.skip("0.5.14+ pass the topk to the pool: it is never unknown there")
    cp = iu.make_cache_params(num_layers=2, conv_dim=8, conv_kernel=4, num_heads=2, head_dim=4, state_size=4)
    with iu.cpu_stock_paths(), iu.plugin(True):
        if topk == "unknown":
            pool = iu.build_pool(cache_params=cp, size=2, mamba_size=6, draft_tokens=4, topk=None, via_init_pools=False)
        else:
            pool = iu.build_pool(cache_params=cp, size=2, mamba_size=6, draft_tokens=4, topk=topk)
        backend = iu.build_backend(pool, device="cpu", topk=2 if topk == 2 else 1, draft_tokens=4)
        iu.set_forward_metadata(backend, torch.tensor([1, 2], dtype=torch.int32), 4)
        mp = pool.mamba_pool
        assert state.pool_state(mp).layout == "stock" and state.pool_state(mp).commit_ok is False
        layout_event = report.events()["dedup_layout"]
        assert layout_event["commit"] == "sglang", layout_event
        cache = mp.mamba_cache
        cache.intermediate_ssm.copy_(torch.randn(cache.intermediate_ssm.shape))
        steps = torch.tensor([1, 2])
        backend.update_mamba_state_after_mtp_verify(steps, None, None, None)
        _check_slots_hold_steps(cache, (1, 2), steps, "SGLang's commit")
        ev = report.events()
        assert (ev["commit_calls"], ev["ours_commit_calls"]) == (1, 0), ev
