"""The padded rows of a CUDA-graph verify batch under zero-copy, through SGLang 0.5.23's own index selection
(issue 36, item 4; docs/zero-copy.md section 11).

A verify graph captured for ``bs`` requests replays a smaller batch with ``num_padding`` padded entries. SGLang's
``MambaAttnBackendBase._replay_metadata`` (the real one, on a real ``HybridReqToTokenPool`` and backend built by their
own constructors) zeroes the padded ``req_pool_indices`` and gives them mamba slot -1. The plugin's
``ZeroCopy.verify_tables`` and SGLang's ``select_verify_intermediate_state_indices`` (through the plugin's Z2 wrapper)
then decide the scratch row each entry writes, and the plugin's commit what each entry stores. Shown here: a padded
entry writes scratch row 0 and seeds from a zero state (seed -1), stores nothing in any slot or ``accepted`` entry,
and row 0 is one SGLang's request allocator never hands out, even when the graph's buffer still holds a live
request's row (stale) in the padded entry, and even where SGLang's own padding row (``pool_size``) is a live row.
"""

from __future__ import annotations

import random
import types

import pytest
import torch

from sglang_mamba_dedup import env, installed, versions
from sglang_mamba_dedup.patches.zero_copy import bookkeeping, hooks
from tests.support import integration as iu

pytestmark = [
    *iu.release_only(versions.ZERO_COPY, f"the zero-copy commit is built for SGLang {versions.ZERO_COPY_RELEASE} only"),
    pytest.mark.usefixtures("allow_cpu"),
]

SIZE, MAMBA_SLOTS, D = 5, 9, 3  # request rows 1..5, mamba slots 1..9, draft tokens


@pytest.fixture
def zero_copy_on(monkeypatch):
    monkeypatch.setenv(env.SWITCH, "1")
    monkeypatch.setenv(env.ZERO_COPY, "1")
    assert installed.apply(["commit", "zero_copy"]) == {"commit": None, "zero_copy": None}
    yield
    installed.revert(force=True)


@pytest.mark.parametrize("graph_bs, live", [(4, 3), (8, 5), (2, 1)], ids=["4-of-3", "8-of-5", "2-of-1"])
def test_a_padded_verify_entry_writes_the_discard_row_and_no_slot(zero_copy_on, graph_bs, live):
    rnd = random.Random()
    seed = rnd.randrange(2**31)
    rnd.seed(seed)
    cp = iu.make_cache_params(
        num_layers=2,
        conv_dim=16,
        conv_kernel=4,
        num_heads=2,
        head_dim=4,
        state_size=4,
        conv_dtype=torch.float32,
        ssm_dtype=torch.float32,
    )
    pool = iu.build_pool(cache_params=cp, size=SIZE, mamba_size=MAMBA_SLOTS, draft_tokens=D, topk=1, device="cpu")
    # SGLang's request allocator hands out rows 1..size: row 0 is never a request's
    assert sorted(pool.free_slots) == list(range(1, SIZE + 1))
    lab = iu.build_backend(pool, device="cpu", topk=1, draft_tokens=D).linear_attn_backend
    lab.init_cuda_graph_state(8, 8 * D)
    rows = rnd.sample(range(1, SIZE + 1), live)
    if SIZE not in rows:  # SGLang's own padding row (pool_size) is a live request's row under zero-copy
        rows[-1] = SIZE
    slots = rnd.sample(range(1, MAMBA_SLOTS + 1), live)
    for r, s in zip(rows, slots):
        pool.req_index_to_mamba_index_mapping[r] = s
    pad = graph_bs - live
    # the graph's static buffer: padded entries still hold live rows from an earlier, larger batch
    rpi = torch.tensor(rows + [rnd.choice(rows) for _ in range(pad)], dtype=torch.int64)
    spec = types.SimpleNamespace(draft_token_num=D, ragged_verify_layout=None)
    from sglang.srt.layers.attention.linear import gdn_backend
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    meta = lab._replay_metadata(graph_bs, rpi, ForwardMode.TARGET_VERIFY, spec, None, num_padding=pad)
    batch_slots = meta.mamba_cache_indices[:graph_bs]
    where = f"seed {seed}, rows {rows}, slots {slots}"
    assert batch_slots.tolist() == slots + [-1] * pad, where  # SGLang's padding: slot -1

    zc = bookkeeping.ZeroCopy(pool.mamba_pool, layers=(0, 1))
    zc.accepted.copy_(torch.randint(1, D + 1, zc.accepted.shape, dtype=torch.int32))
    accepted_before = zc.accepted.clone()
    tables = zc.verify_tables(0, rpi, batch_slots)
    token = hooks._ACTIVE.set(tables)
    try:  # SGLang's own row selection, as its GDN verify calls it (the plugin's Z2 answers)
        selected = gdn_backend.select_verify_intermediate_state_indices(
            torch.arange(graph_bs, dtype=torch.int32), rpi, batch_slots >= 0, SIZE
        )
    finally:
        hooks._ACTIVE.reset(token)
    assert selected is tables.rows
    assert tables.rows.tolist() == rows + [0] * pad, where  # padding: scratch row 0, never a request's
    assert 0 not in rows and SIZE not in tables.rows.tolist()[live:], where
    pitch = zc.pitch
    want_seeds = [r * pitch + int(accepted_before[r]) - 1 for r in rows] + [-1] * pad  # -1: a zero initial state
    assert tables.seeds.tolist() == want_seeds, where

    # the commit of that batch: a padded entry (slot -1) stores no window and no accepted entry, whatever its step
    cache = pool.mamba_pool.mamba_cache
    for c in cache.conv:
        c.copy_(torch.randn(c.shape, dtype=c.dtype))
    for w in cache.intermediate_conv_window:  # its storage: the plugin's view overlaps itself
        flat = torch.empty(0, dtype=w.dtype).set_(w.untyped_storage())
        flat.copy_(torch.randn(flat.shape, dtype=w.dtype))
    conv_before = [c.clone() for c in cache.conv]
    steps = torch.tensor([rnd.randrange(D) for _ in range(graph_bs)], dtype=torch.int32)
    zc.commit(cache, (steps, batch_slots), None, tables.rows)
    want_accepted = accepted_before.clone()
    for n, r in enumerate(rows):
        want_accepted[r] = int(steps[n]) + 1
    assert torch.equal(zc.accepted, want_accepted), f"{where}: {zc.accepted.tolist()} != {want_accepted.tolist()}"
    for conv, windows, before in zip(cache.conv, cache.intermediate_conv_window, conv_before):  # [L, slot, ...]
        untouched = [s for s in range(conv.shape[1]) if s not in slots]
        assert torch.equal(conv[:, untouched], before[:, untouched]), f"{where}: a padded entry stored a window"
        for n, (r, s) in enumerate(zip(rows, slots)):
            assert torch.equal(conv[:, s], windows[:, r, int(steps[n])]), f"{where}: row {r} -> slot {s}"
