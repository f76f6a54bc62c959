"""The zero-copy commit's kernel parts, against independent PyTorch references (``tests/support/reference.py``):

* the commit with the ``accepted`` table folded in: the conv windows exactly as without it, and ``accepted[src row]
  = step + 1`` for each valid accept row, nothing else touched (no track row, no skipped row, no other entry);
* the seed index (``kernels.seed_index.seeded_rows``): rows and seeds for padding entries, odd sizes, both index
  dtypes, a padded ``req_pool_indices`` buffer longer than the batch;
* the stage-in form of the commit kernel (``temporal[:, slot] -> scratch[:, row, 0]``, all layers in one launch).
"""

from tests.support.kernels import (  # noqa: I001  (sets TRITON_INTERPRET before triton loads)
    DEVICE,
    DTYPE_IDS,
    assert_bitwise_equal,
    conv_source,
    new_generator,
    poison,
    rand,
)

import pytest
import torch

from sglang_mamba_dedup.kernels import state_commit
from sglang_mamba_dedup.kernels.seed_index import seeded_rows
from tests.support.reference import seeded_rows_reference

L, ROWS, SLOTS, DIM = 2, 7, 9, 5


def _index(g, n, rows, slots, idx_dtype):
    """``n`` entries on distinct random rows (1..rows-1) and distinct slots; every third one skipped (step or slot -1)."""
    perm_rows = torch.randperm(rows - 1, generator=g)[:n] + 1
    perm_slots = torch.randperm(slots, generator=g)[:n]
    steps = torch.randint(0, 4, (n,), generator=g)
    for i in range(0, n, 3):
        if i % 2:
            steps[i] = -1
        else:
            perm_slots[i] = -1
    return (t.to(idx_dtype).to(DEVICE) for t in (steps, perm_slots, perm_rows))


@pytest.mark.parametrize("conv_dtype", [torch.bfloat16, torch.float32], ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64], ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("track", [False, True], ids=["accept", "accept+track"])
def test_the_folded_accepted_update_is_exact_and_moves_the_same_windows(conv_dtype, idx_dtype, track):
    g, seed = new_generator()
    D, K, n = 4, 4, 5
    src = conv_source("dedup", L, ROWS, D, K, DIM, conv_dtype, g)
    dst = poison(torch.empty((L, SLOTS, DIM, K - 1), dtype=conv_dtype, device=DEVICE))
    expected = dst.clone()
    steps, slots, rows = _index(g, n, ROWS, SLOTS, idx_dtype)
    # before: values no step + 1 (1..D) can take, so every store is seen
    accepted = torch.randint(D + 1, D + 9, (ROWS,), generator=g, dtype=torch.int32).to(DEVICE)
    accepted_before = accepted.clone()
    track_set = (None, None)
    if track:  # a track row must never store into accepted
        track_set = (steps.clone(), torch.full_like(slots, -1))
    plan = state_commit.get_plan([dst], [src], None, None, accepted=accepted)
    assert plan.accepted and state_commit.get_plan([dst], [src], None, None) is not plan  # its own cache entry
    state_commit.launch(plan, accept=(steps, slots), track=track_set, src_rows=rows)
    for r in range(n):  # the reference: source row rows[r] for index row r
        if 0 <= int(steps[r]) < D and 0 <= int(slots[r]) < SLOTS:
            expected[:, int(slots[r])] = src[:, int(rows[r]), int(steps[r])]
    assert_bitwise_equal(dst, expected, f"seed {seed}: conv windows")
    want = accepted_before.clone()
    for r in range(n):
        if 0 <= int(steps[r]) < D and 0 <= int(slots[r]) < SLOTS:
            want[int(rows[r])] = int(steps[r]) + 1
    assert torch.equal(accepted, want), f"seed {seed}: accepted {accepted.tolist()} != {want.tolist()}"
    assert not torch.equal(want, accepted_before), f"seed {seed}: the test moved nothing (it could not fail)"


def test_a_plan_refuses_a_bad_accepted_table():
    g, _ = new_generator()
    src = conv_source("dense", L, ROWS, 2, 4, DIM, torch.float32, g)
    dst = torch.empty((L, SLOTS, DIM, 3), device=DEVICE)
    for table, match in (
        (torch.ones(ROWS, dtype=torch.int64, device=DEVICE), "int32"),
        (torch.ones(ROWS - 1, dtype=torch.int32, device=DEVICE), "entries for"),
        (torch.ones(ROWS, 2, dtype=torch.int32, device=DEVICE)[:, 0], "dense 1-D"),
    ):
        with pytest.raises(ValueError, match=match):
            state_commit.get_plan([dst], [src], None, None, accepted=table)


@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64], ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("n,padded", [(1, 0), (5, 3), (130, 2)], ids=["n1", "n5-padded", "n130-two-blocks"])
def test_seeded_rows_match_the_reference(idx_dtype, n, padded):
    g, seed = new_generator()
    rows_total, pitch = 300, 4
    rpi = (torch.randperm(rows_total - 1, generator=g)[: n + padded] + 1).to(torch.int64).to(DEVICE)
    slots = torch.randint(-1, 50, (n,), generator=g).to(idx_dtype).to(DEVICE)
    slots[0] = -1 if n > 1 else slots[0]  # a padding entry (CUDA-graph padding: slot -1)
    accepted = torch.randint(1, pitch + 1, (rows_total,), generator=g, dtype=torch.int32).to(DEVICE)
    rows, seeds = seeded_rows(rpi, slots, accepted, pitch)
    want_rows, want_seeds = seeded_rows_reference(rpi, slots, accepted, pitch)
    assert rows.dtype == torch.int32 and seeds.dtype == idx_dtype
    assert torch.equal(rows, want_rows), f"seed {seed}"
    assert torch.equal(seeds, want_seeds), f"seed {seed}"
    assert (seeds[slots < 0] == -1).all() and (rows[slots < 0] == 0).all()


def test_seeded_rows_refuses_a_short_row_table():
    with pytest.raises(ValueError, match="req_pool_indices for 3 slots"):
        seeded_rows(
            torch.zeros(2, dtype=torch.int64, device=DEVICE),
            torch.zeros(3, dtype=torch.int32, device=DEVICE),
            torch.ones(4, dtype=torch.int32, device=DEVICE),
            2,
        )


@pytest.mark.parametrize("ssm_dtype", [torch.float32, torch.bfloat16], ids=lambda d: DTYPE_IDS[d])
def test_the_stage_in_form_copies_every_layer_into_column_0(ssm_dtype):
    """``scratch[:, rows[n], 0] = temporal[:, slots[n]]`` for every layer in one launch (zero steps, source rows =
    slots); a padding entry (slot -1) writes nothing; every other scratch column stays as it was."""
    g, seed = new_generator()
    state, P, n = (3, 4, 5), 3, 4
    temporal = rand((L, SLOTS, *state), ssm_dtype, g)
    scratch = poison(torch.empty((L, ROWS, P, *state), dtype=ssm_dtype, device=DEVICE))
    expected = scratch.clone()
    slots = torch.tensor([4, -1, 0, 8], dtype=torch.int32, device=DEVICE)
    rows = torch.tensor([2, 0, 6, 1], dtype=torch.int64, device=DEVICE)
    src, dst = temporal[:, :, None], scratch[:, :, 0]
    plan = state_commit.get_plan([], [], dst, src, owner=temporal)
    zeros = torch.zeros(n, dtype=torch.int32, device=DEVICE)
    state_commit.launch(plan, ssm=(src, dst), accept=(zeros, rows), src_rows=slots)
    for r in (0, 2, 3):  # the reference, directly: row rows[r] gets slot slots[r]
        expected[:, int(rows[r]), 0] = temporal[:, int(slots[r])]
    assert_bitwise_equal(scratch, expected, f"seed {seed}: scratch after the stage-in")


@pytest.mark.skipif(DEVICE.type != "cuda", reason="the direct launch exists on CUDA only (the interpreter has none)")
def test_the_source_row_variant_takes_the_direct_launch_and_stays_exact(monkeypatch):
    """The zero-copy commit (conv windows from source rows, ``accepted`` stored) compiles through Triton on its first
    call, then launches directly (Triton's JIT path is not entered: here it would raise), bit-exact each time; the
    host time of the zero-copy commit call depends on it (issue 34)."""
    g, seed = new_generator()
    D, K, n = 4, 4, 5
    src = conv_source("dedup", L, ROWS, D, K, DIM, torch.bfloat16, g)
    dst = torch.empty((L, SLOTS, DIM, K - 1), dtype=torch.bfloat16, device=DEVICE)
    accepted = torch.zeros(ROWS, dtype=torch.int32, device=DEVICE)
    plan = state_commit.get_plan([dst], [src], None, None, accepted=accepted)
    steps, slots, rows = _index(g, n, ROWS, SLOTS, torch.int64)
    assert state_commit.launch(plan, accept=(steps, slots), src_rows=rows) == "triton"
    jit = state_commit._fused_commit_kernel

    class _NoJit:
        def __getitem__(self, grid):
            raise AssertionError("Triton's launch path was entered")

    monkeypatch.setattr(state_commit, "_fused_commit_kernel", _NoJit())
    for trial in range(3):
        poison(dst)
        expected = dst.clone()
        steps, slots, rows = _index(g, n, ROWS, SLOTS, torch.int64)
        assert state_commit.launch(plan, accept=(steps, slots), src_rows=rows) == "direct", f"trial {trial}"
        for r in range(n):
            if 0 <= int(steps[r]) < D and 0 <= int(slots[r]) < SLOTS:
                expected[:, int(slots[r])] = src[:, int(rows[r]), int(steps[r])]
        assert_bitwise_equal(dst, expected, f"seed {seed}: direct call {trial}")
    monkeypatch.setattr(state_commit, "_fused_commit_kernel", jit)
