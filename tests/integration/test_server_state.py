"""The ``server_state`` feature (issue 35, item 6): SGLang's own ``Scheduler.get_internal_state`` (the release's real
body, run on a stand-in scheduler whose other attributes answer zero) with the plugin on carries a ``mamba_dedup``
entry: the running-request cap asked for and in force, the mamba slots of the scheduler's real pool, and the ledger
of that pool as the plugin recorded it when the pool was built; every value survives JSON (SGLang sends the state
between processes with msgpack). With the plugin off there is no entry."""

from __future__ import annotations

import json

import pytest

from sglang_mamba_dedup import versions
from sglang_mamba_dedup.patches import server_state
from tests.support import integration as iu

pytestmark = [
    *iu.release_only(versions.SERVER_STATE, f"server_state is shipped from SGLang {versions.SERVER_STATE_FROM} on"),
    pytest.mark.usefixtures("allow_cpu"),
]


class _Zero(float):
    """Whatever SGLang's readback asks of a scheduler part the test does not model: zero, callable, indexable."""

    def __new__(cls):
        return float.__new__(cls, 0.0)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Zero()

    def __call__(self, *args, **kwargs):
        return _Zero()

    def __iter__(self):
        return iter(())

    def __getitem__(self, key):
        return _Zero()


class _Scheduler:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Zero()


def _publish() -> None:
    """The server arguments SGLang's readback starts from: the runtime context (0.5.16+), or the older global."""
    iu.publish_server_args()
    from sglang.srt import server_args as sa_module

    setter = getattr(sa_module, "set_global_server_args_for_scheduler", None)
    if setter is not None and not iu.NEW_LAYOUT:
        setter(sa_module.ServerArgs(model_path="dummy", disable_radix_cache=True))


def _internal_state(scheduler) -> dict:
    from sglang.srt.managers.io_struct import GetInternalStateReq
    from sglang.srt.managers.scheduler import Scheduler

    try:
        from sglang.srt.managers.scheduler_components.internal_state import SchedulerInternalStateController
    except ImportError:  # before 0.5.22 the readback is Scheduler's own
        pass
    else:
        scheduler.internal_state = SchedulerInternalStateController(scheduler, record_step_time=False)
    try:
        return Scheduler.get_internal_state(scheduler, GetInternalStateReq()).internal_state
    except AssertionError as exc:  # 0.5.16: its readback asks the elastic-EP manager, which no stand-in has
        if "Elastic EP" not in str(exc):
            raise
        pytest.skip(f"this release's readback needs a live elastic-EP state: {exc}")


def test_each_scheduler_says_its_cap_slots_and_ledger():
    _publish()
    cp = iu.make_cache_params(num_layers=2, conv_dim=8, conv_kernel=4, num_heads=2, head_dim=4, state_size=4)
    with iu.cpu_stock_paths(), iu.plugin(True):
        rtp = iu.build_pool(cache_params=cp, size=3, mamba_size=7, draft_tokens=4, topk=1)
        asked = _Scheduler(max_running_requests=8)
        scheduler = _Scheduler(max_running_requests=3, req_to_token_pool=rtp, server_args=asked)
        state = _internal_state(scheduler)
        entry = state[server_state.KEY]
        assert json.loads(json.dumps(entry)) == entry  # plain JSON types only
        assert entry["mode"] == "on" and {"dedup_layout", "commit", "server_state"} <= set(entry["applied"])
        assert entry["max_running_requests"] == {"asked": 8, "effective": 3}
        assert entry["mamba_slots"] == rtp.mamba_pool.size == 7
        assert entry["commits"] == {"commit_calls": 0, "ours_commit_calls": 0} and entry["zero_copy"] is None
        (ledger,) = entry["ledgers"]
        assert ledger["pool"] == type(rtp.mamba_pool).__name__ and ledger["allocated_bytes"] > 0
        assert {"conv", "temporal", "intermediate_ssm", "intermediate_conv_window"} <= set(ledger["buffers"])
        assert state.get("effective_max_running_requests_per_dp") == 3  # SGLang's own answer is kept
    with iu.plugin(False):
        assert server_state.KEY not in _internal_state(_Scheduler(max_running_requests=3))


def _odd(**attrs):
    import types

    return types.SimpleNamespace(**attrs)


def test_numpy_and_tensor_integers_are_numbers_and_huge_ones_are_null():
    """Audit 2026-12-04 (m16 of the one before): numpy integers were silently null; an integer msgpack cannot carry
    (beyond 64 bits) would make SGLang's whole answer fail after our wrapper returned. Both are handled."""
    import msgspec
    import numpy as np
    import torch

    from sglang_mamba_dedup import report, state

    pool = _odd(size=np.int32(300))
    sched = _odd(max_running_requests=np.int64(48), server_args=_odd(max_running_requests=np.int64(256)))
    sched.req_to_token_pool = _odd(mamba_pool=pool)
    entry = server_state.scheduler_state(sched)
    assert entry["max_running_requests"] == {"asked": 256, "effective": 48} and entry["mamba_slots"] == 300
    assert type(entry["mamba_slots"]) is int and json.loads(json.dumps(entry)) == entry
    pool.size = torch.tensor(7)
    assert server_state.scheduler_state(sched)["mamba_slots"] == 7
    sched.max_running_requests, pool.size = 2**70, 1.5
    with state.STATE.lock:
        state.STATE.events["commit_calls"] = 2**65
    try:
        entry = server_state.scheduler_state(sched)
    finally:
        report.clear_events()
    assert entry["max_running_requests"]["effective"] is None and entry["mamba_slots"] is None
    assert entry["commits"]["commit_calls"] is None
    msgspec.msgpack.encode(entry)


def test_the_zero_copy_decision_is_this_schedulers_pool():
    """Design review 2026-12-04 D3: the decision and its reason are each pool's (``PoolState``); the process-wide
    event is a log of the last pool decided and is never read back. Two pools refused for different reasons each
    report their own, a pool that took zero-copy says on, and an undecided pool says nothing, whatever that event
    says."""
    from sglang_mamba_dedup import report, state

    scheds = {}
    for name, zero_copy, reason in (
        ("on", object(), None),
        ("a", None, "no per-step SSM scratch (a draft's pool, or ReplaySSM)"),
        ("b", None, "the radix cache is on (it snapshots the committed state) (disable_radix_cache=False)"),
    ):
        pool = _odd(size=8)
        ps = state.pool_state(pool)
        ps.zero_copy_decided, ps.zero_copy, ps.zero_copy_reason = True, zero_copy, reason
        scheds[name] = _odd(max_running_requests=4, req_to_token_pool=_odd(mamba_pool=pool))
    undecided = _odd(max_running_requests=4, req_to_token_pool=_odd(mamba_pool=_odd(size=8)))
    report.record_zero_copy("off: the last pool decided")  # a log line only
    try:
        got = {k: server_state.scheduler_state(s)["zero_copy"]["decision"] for k, s in scheds.items()}
        assert got == {
            "on": "on",
            "a": "off: no per-step SSM scratch (a draft's pool, or ReplaySSM)",
            "b": "off: the radix cache is on (it snapshots the committed state) (disable_radix_cache=False)",
        }
        assert server_state.scheduler_state(undecided)["zero_copy"] is None
        assert report.events()["zero_copy"] == "off: the last pool decided"
    finally:
        report.clear_events()
