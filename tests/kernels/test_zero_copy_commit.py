"""The zero-copy commit's kernel parts, against independent PyTorch references (``tests/support/reference.py``):

* the commit with the ``accepted`` table folded in: the conv windows exactly as without it, and ``accepted[src row]
  = step + 1`` for each valid accept row, nothing else touched (no track row, no skipped row, no other entry);
* the commit with a track set (docs/zero-copy.md §12.3, the radix cache on; ``ssm_track_only``): accept rows roll
  the conv windows and set ``accepted``, track rows copy conv windows and SSM state from the same source rows, in one
  launch; the two traps of review fix R7 each have a test (a track row storing ``accepted``, a track row's conv
  window skipped), both seen failing against a kernel mutated that way;
* the seed index (``kernels.seed_index.seeded_rows``): rows and seeds for padding entries, odd sizes, both index
  dtypes, a padded ``req_pool_indices`` buffer longer than the batch;
* the stage-in form of the commit kernel (``temporal[:, slot] -> scratch[:, row, 0]``, all layers in one launch).
"""

from tests.support.kernels import (  # noqa: I001  (sets TRITON_INTERPRET before triton loads)
    DEVICE,
    DTYPE_IDS,
    assert_bitwise_equal,
    assert_outside_view_untouched,
    conv_source,
    new_generator,
    poison,
    rand,
    strided_dst,
)

import pytest
import torch

from sglang_mamba_dedup.kernels import state_commit
from sglang_mamba_dedup.kernels.seed_index import seeded_rows
from tests.support.reference import seeded_rows_reference, zero_copy_commit_reference

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
def test_the_folded_accepted_update_is_exact_and_moves_the_same_windows(conv_dtype, idx_dtype):
    g, seed = new_generator()
    D, K, n = 4, 4, 5
    src = conv_source("dedup", L, ROWS, D, K, DIM, conv_dtype, g)
    dst = poison(torch.empty((L, SLOTS, DIM, K - 1), dtype=conv_dtype, device=DEVICE))
    expected = dst.clone()
    steps, slots, rows = _index(g, n, ROWS, SLOTS, idx_dtype)
    # before: values no step + 1 (1..D) can take, so every store is seen
    accepted = torch.randint(D + 1, D + 9, (ROWS,), generator=g, dtype=torch.int32).to(DEVICE)
    accepted_before = accepted.clone()
    plan = state_commit.get_plan([dst], [src], None, None, accepted=accepted)
    assert plan.accepted and state_commit.get_plan([dst], [src], None, None) is not plan  # its own cache entry
    state_commit.launch(plan, accept=(steps, slots), src_rows=rows)
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


def test_a_conv_only_zero_copy_plan_refuses_a_track_set():
    """Track rows on a plan without the SSM pair would copy conv windows only: the tree would get a stale SSM state
    (HR2). Refused, with nothing launched."""
    g, _ = new_generator()
    src = conv_source("dedup", L, ROWS, 4, 4, DIM, torch.bfloat16, g)
    dst = poison(torch.empty((L, SLOTS, DIM, 3), dtype=torch.bfloat16, device=DEVICE))
    accepted = torch.ones(ROWS, dtype=torch.int32, device=DEVICE)
    steps, slots, rows = _index(g, 4, ROWS, SLOTS, torch.int64)
    plan = state_commit.get_plan([dst], [src], None, None, accepted=accepted)
    with pytest.raises(ValueError, match="without the SSM pair would leave the track slots' SSM states stale"):
        state_commit.launch(plan, accept=(steps, slots), track=(steps, slots), src_rows=rows)
    assert torch.isnan(dst.float()).all() and (accepted == 1).all()


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


# ---------------------------------------------------------------- the commit with a track set (§12.3, Z5')

ZR, ZSLOTS, ZDIMS, ZSSM = 7, 16, (5, 3), (3, 5)  # source rows 0..6 (0: the discard row), two odd conv kinds
ZDTYPES = [  # (conv, ssm)
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.float16),
    (torch.float32, torch.bfloat16),
]


def _track_index(g, n, pad, D, idx_dtype, row_dtype):
    """``n`` requests on distinct rows ``1..ZR-1`` in a shuffled order, then ``pad`` padding entries (row 0, slots -1,
    steps that would be valid). Accept slots and track slots are distinct. The track set has every kind of row:
    no crossing (step -1), a crossing at another step than the accept step, a crossing whose track slot is -1 (a
    row freed under overlap), and a crossing of a row whose accept row is skipped (its ``accepted`` entry must stay).
    Returns (src_rows, (steps, slots), (track_steps, track_slots))."""
    assert 4 <= n <= ZR - 1
    rows = (torch.randperm(ZR - 1, generator=g)[:n] + 1).tolist() + [0] * pad
    free = torch.randperm(ZSLOTS, generator=g).tolist()
    acc_slots, trk_slots = free[:n] + [-1] * pad, free[n : 2 * n] + [-1] * pad
    acc_steps = torch.randint(0, D, (n + pad,), generator=g).tolist()
    trk_steps = [
        -1 if torch.rand(1, generator=g).item() < 0.3 else s for s in torch.randint(0, D, (n,), generator=g).tolist()
    ]
    trk_steps += torch.randint(0, D, (pad,), generator=g).tolist()
    trk_steps[0] = (acc_steps[0] + 1) % D  # crosses at another step than it accepts
    trk_steps[1], trk_slots[1] = 0, -1  # crosses, but its track slot was freed
    trk_steps[2], acc_slots[2] = D - 1, -1  # crosses while its accept row is skipped
    trk_steps[3] = -1  # no crossing

    def as_t(values, dtype):
        return torch.tensor(values, dtype=dtype, device=DEVICE)

    return (
        as_t(rows, row_dtype),
        (as_t(acc_steps, idx_dtype), as_t(acc_slots, idx_dtype)),
        (as_t(trk_steps, idx_dtype), as_t(trk_slots, idx_dtype)),
    )


def _track_case(g, D, K, conv_dtype, ssm_dtype, src_kind="dedup"):
    """The states of one zero-copy commit: NaN-poisoned destinations, random sources, an ``accepted`` table holding
    values no ``step + 1`` can take (so every store is seen)."""
    conv_srcs = [conv_source(src_kind, L, ZR, D, K, dim, conv_dtype, g) for dim in ZDIMS]
    conv_dsts = [poison(torch.empty((L, ZSLOTS, dim, K - 1), dtype=conv_dtype, device=DEVICE)) for dim in ZDIMS]
    ssm_src = rand((L, ZR, D, *ZSSM), ssm_dtype, g)
    ssm_dst = poison(torch.empty((L, ZSLOTS, *ZSSM), dtype=ssm_dtype, device=DEVICE))
    accepted = torch.randint(D + 1, D + 9, (ZR,), generator=g, dtype=torch.int32).to(DEVICE)
    return dict(conv_dsts=conv_dsts, conv_srcs=conv_srcs, ssm_dst=ssm_dst, ssm_src=ssm_src, accepted=accepted)


def _expected_zero_copy(states, src_rows, accept, track):
    exp = dict(
        states,
        conv_dsts=[d.clone() for d in states["conv_dsts"]],
        ssm_dst=states["ssm_dst"].clone(),
        accepted=states["accepted"].clone(),
    )
    zero_copy_commit_reference(
        **exp,
        src_rows=src_rows,
        accept_steps=accept[0],
        accept_slots=accept[1],
        track_steps=track[0] if track else None,
        track_slots=track[1] if track else None,
    )
    return exp


def _launch_zero_copy(states, src_rows, accept, track):
    plan = state_commit.get_plan(
        states["conv_dsts"],
        states["conv_srcs"],
        states["ssm_dst"],
        states["ssm_src"],
        accepted=states["accepted"],
        ssm_track_only=True,
    )
    assert plan.ssm_track_only and plan.accepted
    return state_commit.launch(
        plan, ssm=(states["ssm_src"], states["ssm_dst"]), accept=accept, track=track, src_rows=src_rows
    )


def _check_zero_copy(states, exp, where):
    for i, (got, want) in enumerate(zip(states["conv_dsts"], exp["conv_dsts"])):
        assert_bitwise_equal(got, want, f"{where}: conv kind {i}")
    assert_bitwise_equal(states["ssm_dst"], exp["ssm_dst"], f"{where}: SSM")
    got, want = states["accepted"].tolist(), exp["accepted"].tolist()
    assert got == want, f"{where}: accepted {got} != {want}"


@pytest.mark.parametrize("src_kind", ["dedup", "dense"])
@pytest.mark.parametrize(
    "idx_dtype,row_dtype",
    [(torch.int32, torch.int64), (torch.int64, torch.int32)],
    ids=["idx_i32-rows_i64", "idx_i64-rows_i32"],
)
@pytest.mark.parametrize("dtypes", ZDTYPES, ids=lambda p: f"conv_{DTYPE_IDS[p[0]]}-ssm_{DTYPE_IDS[p[1]]}")
def test_the_zero_copy_commit_with_a_track_set_matches_the_reference(dtypes, idx_dtype, row_dtype, src_kind):
    """One launch: the accept rows roll their conv windows and set ``accepted``, the track rows copy the conv windows
    and the SSM state of their track step, both from the source rows ``src_rows`` (shuffled, with padding on row 0);
    every other destination element keeps its NaN, every other ``accepted`` entry its value."""
    g, seed = new_generator()
    D, K, n, pad = 4, 4, 5, 2
    states = _track_case(g, D, K, *dtypes, src_kind=src_kind)
    src_rows, accept, track = _track_index(g, n, pad, D, idx_dtype, row_dtype)
    exp = _expected_zero_copy(states, src_rows, accept, track)
    _launch_zero_copy(states, src_rows, accept, track)
    _check_zero_copy(states, exp, f"seed {seed}")
    # the test could fail: track rows wrote SSM states, and an accept row's slot kept its NaN SSM
    assert not torch.isnan(exp["ssm_dst"][:, int(track[1][0])].float()).any(), f"seed {seed}"
    assert torch.isnan(exp["ssm_dst"][:, int(accept[1][0])].float()).all(), f"seed {seed}"


@pytest.mark.parametrize("D,K,n,pad", [(1, 2, 4, 0), (3, 3, 6, 3), (8, 4, 4, 1)], ids=["D1-K2", "D3-K3-n6", "D8-K4"])
def test_the_zero_copy_commit_with_a_track_set_at_odd_sizes(D, K, n, pad):
    g, seed = new_generator()
    states = _track_case(g, D, K, torch.bfloat16, torch.float32)
    src_rows, accept, track = _track_index(g, n, pad, D, torch.int64, torch.int64)
    if D == 1:  # step 0 only: the crossing-at-another-step row crosses at 0 too
        track[0][0] = 0
    exp = _expected_zero_copy(states, src_rows, accept, track)
    _launch_zero_copy(states, src_rows, accept, track)
    _check_zero_copy(states, exp, f"seed {seed} D={D} K={K} n={n} pad={pad}")


def test_the_zero_copy_commit_with_a_track_set_into_strided_pools():
    """Destinations that are views over larger buffers (every stride non-trivial): exact inside, nothing written
    outside the views."""
    g, seed = new_generator()
    D, K, n = 4, 4, 5
    states = _track_case(g, D, K, torch.bfloat16, torch.float32)
    pairs = [strided_dst((L, ZSLOTS, dim, K - 1), torch.bfloat16) for dim in ZDIMS]
    ssm_big = poison(torch.empty((L + 1, ZSLOTS + 3, *ZSSM), dtype=torch.float32, device=DEVICE))
    states.update(conv_dsts=[p[0] for p in pairs], ssm_dst=ssm_big[1:, 3:])
    bigs = [p[1] for p in pairs] + [ssm_big]
    bigs_before = [b.clone() for b in bigs]
    src_rows, accept, track = _track_index(g, n, 1, D, torch.int64, torch.int64)
    exp = _expected_zero_copy(states, src_rows, accept, track)
    _launch_zero_copy(states, src_rows, accept, track)
    _check_zero_copy(states, exp, f"seed {seed}")
    for view, big, before in zip([*states["conv_dsts"], states["ssm_dst"]], bigs, bigs_before):
        assert_outside_view_untouched(view, big, before, f"seed {seed}")


def test_a_track_row_never_stores_accepted():
    """R7, first trap: a crossing row's track step differs from its accept step; ``accepted`` must hold the accept
    step + 1 (the next verify seeds from it), and a row whose accept row is skipped keeps its entry even though its
    track row is valid."""
    g, seed = new_generator()
    D, n = 4, 4
    states = _track_case(g, D, 4, torch.float32, torch.float32)
    src_rows, accept, track = _track_index(g, n, 0, D, torch.int64, torch.int64)
    track[0][:] = torch.tensor([(int(s) + 1) % D for s in accept[0]], device=DEVICE)  # every row crosses elsewhere
    unused = sorted(set(range(ZSLOTS)) - set(accept[1].tolist()) - set(track[1].tolist()))
    track[1][1] = unused[0]  # its track slot was -1: every track row is valid here
    before = states["accepted"].clone()
    _launch_zero_copy(states, src_rows, accept, track)
    rows = src_rows.tolist()
    for r in range(n):
        want = int(accept[0][r]) + 1 if int(accept[1][r]) >= 0 else int(before[rows[r]])
        got = int(states["accepted"][rows[r]])
        assert got == want, f"seed {seed}: row {rows[r]} (index row {r}): accepted {got}, want {want}"
    untouched = [i for i in range(ZR) if i not in rows[:n]]
    assert states["accepted"][untouched].tolist() == before[untouched].tolist(), f"seed {seed}"


def test_a_track_row_always_copies_its_conv_windows():
    """R7, second trap: the SSM-track-only variant skips the SSM tiles of accept rows, never the conv tiles of a track
    row: every valid track slot holds the conv windows (every kind) and the SSM state of its track step."""
    g, seed = new_generator()
    D, n = 4, 5
    states = _track_case(g, D, 3, torch.bfloat16, torch.float32)
    src_rows, accept, track = _track_index(g, n, 0, D, torch.int32, torch.int64)
    _launch_zero_copy(states, src_rows, accept, track)
    checked = 0
    for r, (t, k) in enumerate(zip(track[0].tolist(), track[1].tolist())):
        if t < 0 or k < 0:
            continue
        row = int(src_rows[r])
        for i, (dst, src) in enumerate(zip(states["conv_dsts"], states["conv_srcs"])):
            assert_bitwise_equal(dst[:, k], src[:, row, t], f"seed {seed}: track slot {k} conv kind {i}")
        assert_bitwise_equal(states["ssm_dst"][:, k], states["ssm_src"][:, row, t], f"seed {seed}: track slot {k} SSM")
        checked += 1
    assert checked >= 2, f"seed {seed}: only {checked} valid track rows"


@pytest.mark.parametrize("conv_dtype", [torch.bfloat16, torch.float32], ids=lambda d: DTYPE_IDS[d])
def test_without_a_track_set_the_track_only_plan_commits_as_the_conv_only_plan(conv_dtype):
    """No track rows: the SSM-track-only plan launches its conv tiles only and writes exactly what the as-built
    zero-copy commit (conv windows only, ``accepted``) writes; the SSM destination is not touched."""
    g, seed = new_generator()
    D, K, n = 4, 4, 5
    states = _track_case(g, D, K, conv_dtype, torch.float32)
    src_rows, accept, _ = _track_index(g, n, 1, D, torch.int64, torch.int64)
    twin = dict(states, conv_dsts=[d.clone() for d in states["conv_dsts"]], accepted=states["accepted"].clone())
    _launch_zero_copy(states, src_rows, accept, None)
    plan = state_commit.get_plan(twin["conv_dsts"], twin["conv_srcs"], None, None, accepted=twin["accepted"])
    state_commit.launch(plan, accept=accept, src_rows=src_rows)
    for i, (a, b) in enumerate(zip(states["conv_dsts"], twin["conv_dsts"])):
        assert_bitwise_equal(a, b, f"seed {seed}: conv kind {i}")
    assert torch.equal(states["accepted"], twin["accepted"]), f"seed {seed}"
    assert torch.isnan(states["ssm_dst"].float()).all(), f"seed {seed}: an accept row wrote an SSM state"


def test_a_track_only_plan_needs_an_ssm_pair_and_conv_windows():
    g, _ = new_generator()
    states = _track_case(g, 2, 4, torch.float32, torch.float32)
    conv_d, conv_s, ssm_d, ssm_s = states["conv_dsts"], states["conv_srcs"], states["ssm_dst"], states["ssm_src"]
    with pytest.raises(ValueError, match="ssm_track_only takes an SSM pair and at least one conv pair"):
        state_commit.get_plan(conv_d, conv_s, None, None, ssm_track_only=True)
    with pytest.raises(ValueError, match="ssm_track_only takes an SSM pair and at least one conv pair"):
        state_commit.get_plan([], [], ssm_d, ssm_s, ssm_track_only=True)
    empty_d, empty_s = conv_d[0][:, :, :0], conv_s[0][:, :, :, :0]
    with pytest.raises(ValueError, match="conv windows with at least one element"):
        state_commit.get_plan([empty_d], [empty_s], ssm_d, ssm_s, ssm_track_only=True)
    plain = state_commit.get_plan(conv_d, conv_s, ssm_d, ssm_s)
    assert state_commit.get_plan(conv_d, conv_s, ssm_d, ssm_s, ssm_track_only=True) is not plain  # its own entry


@pytest.mark.skipif(DEVICE.type != "cuda", reason="the direct launch exists on CUDA only (the interpreter has none)")
def test_the_zero_copy_commit_with_a_track_set_takes_the_direct_launch(monkeypatch):
    """Compiled on the first call, launched directly after (Triton's JIT path would raise), exact each time."""
    g, seed = new_generator()
    D, K, n = 4, 4, 5
    states = _track_case(g, D, K, torch.bfloat16, torch.float32)
    src_rows, accept, track = _track_index(g, n, 1, D, torch.int64, torch.int64)
    assert _launch_zero_copy(states, src_rows, accept, track) == "triton"
    jit = state_commit._fused_commit_kernel

    class _NoJit:
        def __getitem__(self, grid):
            raise AssertionError("Triton's launch path was entered")

    monkeypatch.setattr(state_commit, "_fused_commit_kernel", _NoJit())
    for trial in range(3):
        for t in (*states["conv_dsts"], states["ssm_dst"]):
            poison(t)
        src_rows, accept, track = _track_index(g, n, 1, D, torch.int64, torch.int64)
        exp = _expected_zero_copy(states, src_rows, accept, track)
        assert _launch_zero_copy(states, src_rows, accept, track) == "direct", f"trial {trial}"
        _check_zero_copy(states, exp, f"seed {seed}: direct call {trial}")
    monkeypatch.setattr(state_commit, "_fused_commit_kernel", jit)
