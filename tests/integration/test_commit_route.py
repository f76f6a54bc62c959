"""One committer per route (issue 49): a backend's route binds its committer once, at its pool's first commit through
it (the fused kernel's, or zero-copy's where the pool's gate took it), and never switches afterwards; the wrapper
counts each commit once, with the launch path its committer returned. Real SGLang pool and backend, real
``update_mamba_state_after_mtp_verify``, the plugin's kernel (``TRITON_INTERPRET=1`` on the CPU).
"""

from __future__ import annotations

import pytest
import torch

from sglang_mamba_dedup import report, state
from sglang_mamba_dedup.offline.sglang_pool import build_pool
from sglang_mamba_dedup.patches import commit as commit_patch
from tests.support import integration as iu

pytestmark = [pytest.mark.release, pytest.mark.usefixtures("allow_cpu")]

D, BS = 3, 2
STEPS = torch.tensor([2, 1], dtype=torch.int64)  # each request's accepted step
ROWS = torch.tensor([2, 1], dtype=torch.int64)  # req_pool_indices: each request's scratch row (row 0: padding)
SLOTS = torch.arange(1, BS + 1, dtype=torch.int32)


def _pool_and_backend():
    cp = iu.make_cache_params(num_layers=2, conv_dim=8, conv_kernel=4, num_heads=2, head_dim=4, state_size=4)
    pool = build_pool(cache_params=cp, size=BS, mamba_size=2 * BS + 2, draft_tokens=D, topk=1, device="cpu")
    backend = iu.build_backend(pool, device="cpu", topk=1, draft_tokens=D)
    iu.set_forward_metadata(backend, SLOTS, D)
    cache = pool.mamba_pool.mamba_cache
    for t in (cache.intermediate_ssm, *cache.intermediate_conv_window):  # distinct values in every step
        flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage())  # a window view overlaps itself
        flat.copy_(torch.randn(flat.shape).to(t.dtype))
    return pool.mamba_pool, backend


def _commit(backend, steps=STEPS, rows=None, track=None):
    track_idx, track_steps = (None, None) if track is None else track
    backend.update_mamba_state_after_mtp_verify(steps, track_idx, track_steps, None, req_pool_indices=rows)


@pytest.fixture
def served(monkeypatch):
    """The plugin on, a pool and backend built under it, and every binding of a committer recorded."""
    iu.ensure_commit_kernel()
    binds: list = []
    bind = commit_patch.bind_committer

    def recording(pool_state):
        binds.append(pool_state)
        return bind(pool_state)

    monkeypatch.setattr(commit_patch, "bind_committer", recording)
    with iu.cpu_stock_paths("cpu"), iu.plugin(True):
        yield binds


def _zero_copy(mamba):
    from sglang_mamba_dedup.patches.zero_copy.bookkeeping import ZeroCopy

    return ZeroCopy(mamba)


def _ssm_slots(mamba):
    return mamba.mamba_cache.temporal[:, SLOTS.long()].clone()


def test_a_route_binds_its_committer_once_per_pool_and_counts_each_commit_once(served):
    mamba, backend = _pool_and_backend()
    for _ in range(3):
        _commit(backend)
    route = backend._smd_route
    assert served == [state.pool_state_of(mamba)] and not route.zero_copy
    events, launches = report.events(), report.launches()
    assert events["commit_calls"] == events["ours_commit_calls"] == 3 and "zc_commit_calls" not in events
    assert sum(launches.values()) == 3, launches  # the launch path, counted with its commit
    # the fused commit ran: every request's slot holds its accepted step's SSM state
    want = mamba.mamba_cache.intermediate_ssm[:, torch.arange(BS), STEPS]
    assert torch.equal(_ssm_slots(mamba), want)

    other, other_backend = _pool_and_backend()  # another pool: a binding of its own
    _commit(other_backend)
    assert served == [state.pool_state_of(mamba), state.pool_state_of(other)]
    assert backend._smd_route is route, "the first backend's route is kept"


def test_a_route_bound_to_the_fused_commit_never_takes_zero_copy(served):
    mamba, backend = _pool_and_backend()
    _commit(backend)
    ps = state.pool_state_of(mamba)
    ps.zero_copy = _zero_copy(mamba)  # a zero-copy decision after the pool's first commit
    accepted = ps.accepted.clone()
    _commit(backend, STEPS - 1, rows=ROWS)
    assert len(served) == 1 and not backend._smd_route.zero_copy
    assert "zc_commit_calls" not in report.events() and report.events()["ours_commit_calls"] == 2
    assert torch.equal(ps.accepted, accepted), "the zero-copy table was written"
    assert torch.equal(_ssm_slots(mamba), mamba.mamba_cache.intermediate_ssm[:, torch.arange(BS), STEPS - 1])


def test_a_route_bound_to_zero_copy_never_takes_the_fused_commit(served):
    mamba, backend = _pool_and_backend()
    ps = state.pool_state(mamba)
    ps.zero_copy = _zero_copy(mamba)  # the gate's decision, before the pool's first commit
    mamba.mamba_cache.temporal.fill_(-7)
    _commit(backend, rows=ROWS)
    assert ps.accepted[ROWS].tolist() == (STEPS + 1).tolist()
    ps.zero_copy = None  # a PoolState changed afterwards: the route keeps its committer
    _commit(backend, STEPS - 1, rows=ROWS)
    assert len(served) == 1 and backend._smd_route.zero_copy
    assert ps.accepted[ROWS].tolist() == STEPS.tolist()
    assert report.events()["zc_commit_calls"] == 2 and sum(report.launches().values()) == 2
    assert bool((mamba.mamba_cache.temporal == -7).all()), "the zero-copy commit moved SSM bytes"
    for conv, windows in zip(mamba.mamba_cache.conv, mamba.mamba_cache.intermediate_conv_window):
        assert torch.equal(conv[:, SLOTS.long()], windows[:, ROWS, STEPS - 1]), "windows not from the requests' rows"


def test_the_zero_copy_commit_refuses_unknown_rows(served):
    mamba, backend = _pool_and_backend()
    state.pool_state(mamba).zero_copy = _zero_copy(mamba)
    with pytest.raises(RuntimeError, match="zero-copy commit without req_pool_indices"):
        _commit(backend, rows=None)
    assert report.events()["commit_calls"] == 0, "a refused commit was counted"


def test_the_zero_copy_commit_with_a_track_set_copies_only_the_tracked_states(served):
    """Z5' (docs/zero-copy.md §12.3): one launch; the tracked request's SSM state and conv windows of its tracked
    step go from its scratch row (not its batch position) into its track slot; a row without a crossing (step -1)
    writes nothing; ``accepted`` is the accepted step's, never the tracked one's; the live slots get no SSM byte;
    counted once, as a zero-copy commit with a track set."""
    mamba, backend = _pool_and_backend()
    ps = state.pool_state(mamba)
    ps.zero_copy = _zero_copy(mamba)
    cache = mamba.mamba_cache
    cache.temporal.fill_(-7)
    for conv in cache.conv:
        conv.fill_(-7)
    track_slots = torch.tensor([BS + 1, BS + 2], dtype=torch.int64)
    track_steps = torch.tensor([0, -1], dtype=torch.int64)  # request 0 crosses at draft step 0; request 1 does not
    _commit(backend, rows=ROWS, track=(track_slots, track_steps))
    k, row = int(track_slots[0]), int(ROWS[0])
    assert torch.equal(cache.temporal[:, k], cache.intermediate_ssm[:, row, 0]), "the tracked SSM state"
    for conv, windows in zip(cache.conv, cache.intermediate_conv_window):
        assert torch.equal(conv[:, k], windows[:, row, 0]), "the tracked conv window"
        assert torch.equal(conv[:, SLOTS.long()], windows[:, ROWS, STEPS]), "the accepted conv windows"
        assert bool((conv[:, int(track_slots[1])] == -7).all()), "a row without a crossing wrote its track slot"
    untouched = [s for s in range(cache.temporal.shape[1]) if s != k]
    assert bool((cache.temporal[:, untouched] == -7).all()), "SSM bytes moved outside the tracked slot"
    assert ps.accepted[ROWS].tolist() == (STEPS + 1).tolist(), "accepted is the accepted step's"
    events = report.events()
    assert (events["commit_calls"], events["zc_commit_calls"], events["zc_track_commits"]) == (1, 1, 1)
    assert events["track_commit_calls"] == events["ours_track_commit_calls"] == 1
    assert sum(report.launches().values()) == 1, "one launch"
    _commit(backend, rows=ROWS)  # without a track set: today's conv-only commit, not counted as a track commit
    assert (report.events()["zc_commit_calls"], report.events()["zc_track_commits"]) == (2, 1)


def test_the_negative_control_reaches_either_committer_through_the_route(served):
    """``commit_step0`` breaks ``_Route.commit``: the fused route then commits step 0, and so does the zero-copy one
    (its ``accepted`` table says one token accepted)."""
    from sglang_mamba_dedup.patches import faults

    fused, fused_backend = _pool_and_backend()
    zero_copy, zc_backend = _pool_and_backend()
    ps = state.pool_state(zero_copy)
    ps.zero_copy = _zero_copy(zero_copy)
    faults.install(faults.COMMIT_STEP0)
    try:
        _commit(fused_backend)
        _commit(zc_backend, rows=ROWS)
    finally:
        faults.remove()
    assert torch.equal(_ssm_slots(fused), fused.mamba_cache.intermediate_ssm[:, torch.arange(BS), 0])
    assert ps.accepted[ROWS].tolist() == [1, 1]
    _commit(zc_backend, rows=ROWS)  # the fault removed: the accepted steps again
    assert ps.accepted[ROWS].tolist() == (STEPS + 1).tolist()
