"""Z8, the tripwire where the radix tree takes a state (docs/zero-copy.md §12.5, HR6, review fix R1): on a pool that
took zero-copy, SGLang's ``MambaComponent.prepare_for_caching_req`` must see exactly SGLang's ``UnifiedRadixCache``
(never a subclass such as LMCache's), with the mamba extra buffer and no int8 checkpoint pool; otherwise one ERROR
(strict mode raises). SGLang's own code runs either way; a pool without zero-copy is never checked."""

from __future__ import annotations

import logging
import types

import pytest

from sglang_mamba_dedup import env, state, versions
from sglang_mamba_dedup.patches import PATCHES
from sglang_mamba_dedup.patches.zero_copy import hooks

pytestmark = pytest.mark.skipif(
    not versions.in_range(versions.installed_sglang_version(), versions.ZERO_COPY),
    reason=f"the zero-copy commit is built for SGLang {versions.ZERO_COPY_RELEASE} only",
)


def _component(cache_type=None, extra_buffer=True, int8=False, zero_copy=True):
    """A ``MambaComponent`` as the tripwire reads it: its tree cache (of ``cache_type``, built without its
    constructor), that cache's pool, and the int8 checkpoint pool."""
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    cache_type = cache_type or UnifiedRadixCache
    cache = cache_type.__new__(cache_type)
    pool = types.SimpleNamespace(name="mamba pool")
    cache.req_to_token_pool = types.SimpleNamespace(mamba_pool=pool)
    cache.enable_mamba_extra_buffer = extra_buffer
    state.pool_state(pool).zero_copy = object() if zero_copy else None
    return types.SimpleNamespace(cache=cache, int8_ckpt_pool=object() if int8 else None)


def _call(component):
    calls = []

    def prepare(*args, **kwargs):
        calls.append((args, kwargs))
        return 7

    assert hooks.radix_tripwire(prepare, component, ("req", "params", 5, True), {}) == 7
    assert len(calls) == 1, "SGLang's own code ran once"


def _subclass():
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    class OtherTree(UnifiedRadixCache):  # the shape of LMCacheUnifiedRadixCache
        pass

    return OtherTree


def test_the_tripwire_is_a_patch_row_of_the_zero_copy_feature():
    (row,) = [p for p in PATCHES if p.name == "mamba_component.prepare_for_caching_req"]
    assert row.feature == "zero_copy" and row.attr == "MambaComponent.prepare_for_caching_req"
    assert row.module == "sglang.srt.mem_cache.unified_cache.components.mamba"
    assert row.wrapper._smd_lazy.endswith("zero_copy.hooks.radix_tripwire")


def test_the_allowed_tree_passes_silently(caplog):
    with caplog.at_level(logging.WARNING, logger="sglang_mamba_dedup"):
        _call(_component())
        _call(_component(cache_type=_subclass(), zero_copy=False))  # not a zero-copy pool: never checked
    assert not caplog.records


@pytest.mark.parametrize(
    "kw,why",
    [
        (dict(cache_type="subclass"), "the tree cache is OtherTree, not SGLang's UnifiedRadixCache"),
        (dict(extra_buffer=False), "no mamba extra buffer (no_buffer"),
        (dict(int8=True), "int8 mamba checkpoints"),
    ],
    ids=["subclass", "no_buffer", "int8"],
)
def test_the_tripwire_fires_once_and_strict_stops(monkeypatch, caplog, kw, why):
    if kw.get("cache_type") == "subclass":
        kw = dict(kw, cache_type=_subclass())
    with caplog.at_level(logging.WARNING, logger="sglang_mamba_dedup"):
        _call(_component(**kw))
        _call(_component(**kw))
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "zero-copy commit is on for this pool, but" in line and why in line and "\n" not in line
    monkeypatch.setenv(env.SWITCH, "strict")
    state.STATE.mode = None
    with pytest.raises(RuntimeError, match=f"strict mode: zero-copy commit is on for this pool, but .*{why[:12]}"):
        hooks.radix_tripwire(lambda *a, **k: pytest.fail("ran"), _component(**kw), (), {})


def _evicting_cache(zero_copy: bool, mamba_evicted: int):
    """A real ``UnifiedRadixCache`` (built without its constructor) whose tree walk evicts ``mamba_evicted`` mamba
    states and 16 tokens: SGLang's own ``_evict`` turns the walk's tally into its ``EvictResult``. The walk stands in
    for either tree core (the Python one or the default Rust one: ``_evict_components`` drives the core through
    its interface, whichever it is)."""
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    cache = UnifiedRadixCache.__new__(UnifiedRadixCache)
    cache.disable = False
    cache.tree_components = (ComponentType.FULL, ComponentType.MAMBA)
    cache.cache_controller = None
    cache.metrics_collector = None
    asked = []

    def walk(request_by_type, tracker, **kw):
        asked.append(request_by_type[ComponentType.MAMBA])
        tracker[ComponentType.FULL] += 16
        tracker[ComponentType.MAMBA] += mamba_evicted

    cache._evict_components = walk
    pool = types.SimpleNamespace(name="mamba pool")
    cache.req_to_token_pool = types.SimpleNamespace(mamba_pool=pool)
    state.pool_state(pool).zero_copy = object() if zero_copy else None
    return cache, asked


@pytest.mark.parametrize("zero_copy", [True, False], ids=["zero-copy-pool", "stock-pool"])
def test_tree_evictions_of_a_zero_copy_pool_are_counted_through_sglangs_own_eviction(monkeypatch, zero_copy):
    """``UnifiedRadixCache._evict`` patched as a server installs it, reached through SGLang's public ``evict``: its
    answer unchanged, and the mamba states it evicted from a zero-copy pool counted (zc_tree_evictions, read by
    ``/get_server_info`` and the e2e's pressure proof); a pool without zero-copy, or an eviction of no mamba state,
    counts nothing. (It wrapped ``MambaComponent.evict_component``, which SGLang's default Rust tree core never
    calls: audit 2026-12-05b C3.)"""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, EvictResult

    from sglang_mamba_dedup import installed, report

    monkeypatch.setenv(env.SWITCH, "1")
    monkeypatch.setenv(env.ZERO_COPY, "1")
    assert installed.apply(["zero_copy"]) == {"zero_copy": None}
    try:
        before = report.events().get("zc_tree_evictions", 0)
        cache, asked = _evicting_cache(zero_copy, 3)
        got = cache.evict(EvictParams(num_tokens=16, mamba_num=3))
        assert got == EvictResult(num_tokens_evicted=16, mamba_num_evicted=3) and asked == [3]
        assert report.events().get("zc_tree_evictions", 0) - before == (3 if zero_copy else 0)
        cache, _ = _evicting_cache(zero_copy, 0)
        assert cache.evict(EvictParams(num_tokens=16)).mamba_num_evicted == 0
        assert report.events().get("zc_tree_evictions", 0) - before == (3 if zero_copy else 0)
    finally:
        installed.revert(["zero_copy"])
        report.clear_events()


def test_sglangs_rust_tree_core_never_calls_the_python_component_eviction():
    """Why the counter sits on the cache: SGLang 0.5.23's default tree core is Rust, and its adapter evicts without
    the Python ``MambaComponent.evict_component``; both cores are driven by ``UnifiedRadixCache._evict``. Read from
    the installed wheel, so a release that changes either fails here."""
    import inspect

    from sglang.srt.environ import envs
    from sglang.srt.mem_cache import unified_radix_cache
    from sglang.srt.mem_cache.rust_tree_core import adapter

    assert envs.SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND.default == "rust"
    assert "evict_component(" not in inspect.getsource(adapter)
    src = inspect.getsource(unified_radix_cache.UnifiedRadixCache)
    assert "return self._evict(params)" in src and "self._evict(" in inspect.getsource(
        unified_radix_cache.UnifiedRadixCache.evict_for_alloc
    )


def test_track_boundaries_of_a_zero_copy_pool_are_counted_by_sglangs_own_host_check(monkeypatch):
    """``SchedulerBatchResultProcessor._mamba_check_track_boundary`` patched as a server installs it: SGLang's own
    check answers (3 tokens accepted, interval 8: a request going from 14 to 17 tokens crosses the boundary at 16, one
    from 10 to 13 does not), and each crossing of a zero-copy pool's request is counted (``zc_track_rows``); a stock
    pool's is not."""
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor

    from sglang_mamba_dedup import installed, report
    from tests.support import zero_copy_sim as sim

    monkeypatch.setenv(env.SWITCH, "1")
    monkeypatch.setenv(env.ZERO_COPY, "1")
    restore = sim.publish_radix_args(sim.RadixConfig(interval=8))
    assert installed.apply(["zero_copy"]) == {"zero_copy": None}
    try:
        proc = types.SimpleNamespace(tree_cache=types.SimpleNamespace(page_size=1))
        check = SchedulerBatchResultProcessor._mamba_check_track_boundary.__get__(proc)
        result = types.SimpleNamespace(
            num_correct_drafts_per_req_cpu=[2], num_non_draft_tokens_per_req=1, grammar_retained_tokens=None
        )
        spec = types.SimpleNamespace(is_none=lambda: False)
        for zero_copy, seqlen, want in ((True, 18, (True, 16)), (True, 14, (False, 0)), (False, 18, (True, 16))):
            pool = types.SimpleNamespace(name="mamba pool")
            state.pool_state(pool).zero_copy = object() if zero_copy else None
            batch = types.SimpleNamespace(req_to_token_pool=types.SimpleNamespace(mamba_pool=pool), spec_algorithm=spec)
            req = types.SimpleNamespace(seqlen=seqlen)
            before = report.events().get("zc_track_rows", 0)
            assert check(req, batch, result, 0) == want, (zero_copy, seqlen)
            counted = report.events().get("zc_track_rows", 0) - before
            assert counted == (1 if zero_copy and want[0] else 0), (zero_copy, seqlen, counted)
            # called through the class with the processor first (another plugin's wrapper around ours): the same
            assert SchedulerBatchResultProcessor._mamba_check_track_boundary(proc, req, batch, result, 0) == want
            again = report.events().get("zc_track_rows", 0) - before - counted
            assert again == counted, (zero_copy, seqlen, again)
    finally:
        installed.revert(["zero_copy"])
        report.clear_events()
        restore()


def test_the_track_boundary_count_passes_sglangs_answer_and_errors_through():
    """The wrapper returns SGLang's own answer object (not a copy), lets SGLang's exception out as it is and counts
    nothing then, and a call it cannot bind (``batch`` by an unknown keyword) still returns SGLang's answer
    uncounted: the scheduler's host path never fails in our code after SGLang has answered."""
    from sglang_mamba_dedup import report

    pool = types.SimpleNamespace(name="mamba pool")
    state.pool_state(pool).zero_copy = object()
    batch = types.SimpleNamespace(req_to_token_pool=types.SimpleNamespace(mamba_pool=pool))
    answer = (True, 16)
    try:
        before = report.events().get("zc_track_rows", 0)
        got = hooks.track_boundaries(lambda *a, **k: answer, object(), ("req", batch, "result", 0), {})
        assert got is answer and report.events().get("zc_track_rows", 0) - before == 1

        class Boom(RuntimeError):
            pass

        def raises(*a, **k):
            raise Boom("SGLang's own")

        with pytest.raises(Boom, match="SGLang's own"):
            hooks.track_boundaries(raises, object(), ("req", batch, "result", 0), {})
        odd = hooks.track_boundaries(lambda *a, **k: answer, object(), (), {"self": object(), "request": "req"})
        assert odd is answer and report.events().get("zc_track_rows", 0) - before == 1
    finally:
        report.clear_events()
