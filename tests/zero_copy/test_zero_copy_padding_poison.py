"""Can a padded verify entry reach a live request's state under zero-copy? (issue 52 item 2; FACTS §13 "Padded
verify under CUDA graphs").

A verify graph captured for ``graph_bs`` requests replays ``live`` of them; SGLang gives the ``graph_bs - live``
padded entries mamba slot -1 while the graph's ``req_pool_indices`` buffer may still hold live rows of an earlier,
larger batch (``tests/zero_copy/test_zero_copy_padding.py`` shows that on SGLang's own ``_replay_metadata``). The
GDN Triton verify runs ``D`` tokens for a padded entry as for a live one, and stores its intermediate states wherever
the row index says. Here SGLang's own verify kernels (``causal_conv1d_update`` and ``TritonGDNKernel.target_verify``,
or the Mamba2 ``selective_state_update``; through the plugin's Z2/Z3/Z4 wrappers, ``World.verify`` of
``test_zero_copy_kernels.py``) run a padded batch with every state that must not be touched poisoned with NaN: the
scratch rows of the live requests outside the batch, the discard row 0, the pool's SSM states (zero-copy never reads
them in a verify) and the conv slots outside the batch. Shown: the poisoned rows keep their bits, the batch's outputs are
finite and equal those of the same batch run unpadded, and the batch's rows hold what the unpadded run wrote. On a
CUDA GPU the padded batch also runs as a replay of a captured CUDA graph (``graph`` ids). The negative control sends
the padded entries to a live row outside the batch (the "row 1" build of FACTS §13): the check sees it.

"Untouched" is bitwise: the poison is a NaN with a payload of ours (``_POISON``), compared as int32. An "all NaN"
check is not enough, because a padded entry's conv output is SGLang's ``torch.empty_like``, never written: on some
runs the padded entry computes NaN from that garbage and writes NaN over NaN (a CI run on 0.5.23, seed 1802020579,
where the negative control's broken padding then went unseen). The negative control fills its victim row with
random finite values, so any write at all changes its bits.
"""

from __future__ import annotations

import random
import types

import pytest
import torch

from sglang_mamba_dedup import versions
from sglang_mamba_dedup.patches.zero_copy import bookkeeping
from tests.support import integration as iu
from tests.support.kernels import bits
from tests.support.zero_copy_world import DEVICE, DIM, ROWS, SLOTS, World

pytestmark = [
    *iu.release_only(versions.ZERO_COPY, f"the zero-copy commit is built for SGLang {versions.ZERO_COPY_RELEASE} only"),
]

D = 3
CASES = [(4, 3), (6, 2)]  # (graph batch size, live entries); ROWS = 6 request rows, so victims remain outside


def _default_rows() -> torch.Tensor:
    """SGLang's batch-position table: rows 0..size-1, then padding on row ``size`` (as ``replay`` in zk builds it)."""
    return torch.cat([torch.arange(ROWS), torch.full((17,), ROWS)]).to(DEVICE, torch.int32)


def _case(seed: int, graph_bs: int, live: int):
    rnd = random.Random(seed)
    rows = rnd.sample(range(1, ROWS + 1), live)
    slots = rnd.sample(range(1, SLOTS), live)
    pad = graph_bs - live
    rpi = torch.tensor(rows + [rnd.choice(rows) for _ in range(pad)], dtype=torch.int64, device=DEVICE)  # stale rows
    batch_slots = torch.tensor(slots + [-1] * pad, dtype=torch.int32, device=DEVICE)  # SGLang's padding: slot -1
    victims = [r for r in range(1, ROWS + 1) if r not in rows]
    return rows, slots, rpi, batch_slots, victims


_POISON = 0x7FC05A5A  # a quiet float32 NaN with a payload of ours; a NaN a kernel computes has other bits


def _poison(w: World, rows, slots, gen: torch.Generator) -> None:
    """Every state outside the batch ``_POISON``; the batch's scratch rows and conv slots random, finite."""
    for t in (w.temporal, w.conv, w.inter_ssm, w.inter_conv):
        assert t.dtype == torch.float32, "the poison is a float32 bit pattern"
        t.view(torch.int32).fill_(_POISON)
    for r in rows:
        w.inter_ssm[0, r] = torch.randn(w.inter_ssm[0, r].shape, generator=gen).to(w.inter_ssm.dtype).to(DEVICE)
    for s in slots:
        w.conv[0, s] = torch.randn(w.conv[0, s].shape, generator=gen).to(DEVICE)
    zc = w.zc
    zc.accepted.copy_(torch.randint(1, D + 1, zc.accepted.shape, generator=gen, dtype=torch.int32).to(DEVICE))


def _snapshot(w: World) -> dict[str, torch.Tensor]:
    return {
        "inter_ssm": w.inter_ssm.clone(),
        "inter_conv": w.inter_conv.clone(),
        "temporal": w.temporal.clone(),
        "conv": w.conv.clone(),
        "accepted": w.zc.accepted.clone(),
    }


def _restore(w: World, snap: dict[str, torch.Tensor]) -> None:
    for name in ("inter_ssm", "inter_conv", "temporal", "conv"):
        getattr(w, name).copy_(snap[name])
    w.zc.accepted.copy_(snap["accepted"])


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal: NaN equals the same NaN, and a NaN written over a NaN is seen."""
    return torch.equal(bits(a), bits(b))


def _run_padded(w: World, drafts, rpi, batch_slots, graph: bool):
    """The padded batch: eagerly, or captured in a CUDA graph and replayed (static inputs, as SGLang replays)."""
    v = types.SimpleNamespace(drafts=drafts)
    if not graph:
        return w.verify(v, rpi, batch_slots, _default_rows())
    static = types.SimpleNamespace(drafts=drafts.to(DEVICE, copy=True))  # a capture copies no host tensor in
    rpi_s, slots_s, default_rows = rpi.clone(), batch_slots.clone(), _default_rows()
    snap = _snapshot(w)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: Triton compiles outside the capture
        w.verify(static, rpi_s, slots_s, default_rows)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y, out, rows = w.verify(static, rpi_s, slots_s, default_rows)
    _restore(w, snap)  # what the warm-up wrote is undone: the replay starts from the poisoned state
    static.drafts.copy_(drafts)
    rpi_s.copy_(rpi)
    slots_s.copy_(batch_slots)
    g.replay()
    torch.cuda.synchronize()
    return y, out, rows


GRAPH = [False, True] if torch.cuda.is_available() else [False]


@pytest.mark.parametrize("graph", GRAPH, ids=["eager", "cuda-graph"][: len(GRAPH)])
@pytest.mark.parametrize("graph_bs, live", CASES, ids=[f"{b}-of-{n}" for b, n in CASES])
@pytest.mark.parametrize("kind", ["gdn", "mamba2"])
def test_padding_never_reaches_a_live_row(zero_copy_patched, kind, graph_bs, live, graph):
    seed = random.SystemRandom().randrange(2**31)
    where = f"seed {seed}"
    gen = torch.Generator().manual_seed(seed)
    w = World(D, torch.float32, True, gen, kind)
    rows, slots, rpi, batch_slots, victims = _case(seed, graph_bs, live)
    assert victims, "no live row outside the batch: the test could not fail"
    where += f", rows {rows}, slots {slots}, victims {victims}"
    _poison(w, rows, slots, gen)
    drafts = torch.randn(graph_bs, D, DIM, generator=gen)
    before = _snapshot(w)

    # the reference: the same live entries, unpadded, eager
    y_ref, out_ref, _ = w.verify(
        types.SimpleNamespace(drafts=drafts[:live]), rpi[:live], batch_slots[:live], _default_rows()
    )
    ref = _snapshot(w)
    _restore(w, before)

    y, out, _ = _run_padded(w, drafts, rpi, batch_slots, graph)
    assert torch.isfinite(y[:live]).all() and torch.isfinite(out[:live].float()).all(), f"{where}: a NaN was read"
    assert torch.equal(y[:live], y_ref) and torch.equal(out[:live], out_ref), f"{where}: outputs differ from unpadded"
    for v in victims:  # the live requests outside the batch: untouched
        untouched = [_same_bits(getattr(w, n)[0, v], before[n][0, v]) for n in ("inter_ssm", "inter_conv")]
        assert all(untouched), f"{where}: padding wrote row {v}"
    for r in rows:  # the batch's rows hold what the unpadded run wrote
        assert torch.equal(w.inter_ssm[0, r], ref["inter_ssm"][0, r]), f"{where}: row {r} SSM steps"
        assert torch.equal(w.inter_conv[0, r], ref["inter_conv"][0, r]), f"{where}: row {r} conv windows"
    assert _same_bits(w.temporal, before["temporal"]), f"{where}: a verify wrote the pool's SSM states"
    outside = [s for s in range(SLOTS) if s not in slots]
    assert _same_bits(w.conv[0, outside], before["conv"][0, outside]), f"{where}: a verify wrote a conv slot outside"
    assert torch.equal(w.zc.accepted, before["accepted"]), f"{where}: a verify moved accepted"


@pytest.mark.parametrize("graph", GRAPH, ids=["eager", "cuda-graph"][: len(GRAPH)])
def test_padding_sent_to_a_live_row_is_seen(zero_copy_patched, monkeypatch, graph):
    """Negative control: the padded entries' scratch row is a live request's outside the batch (FACTS §13's "row 1"
    build): that row is written, and the bitwise check above sees it, eagerly and in a CUDA-graph replay. The victim
    row holds random finite values here, so the write shows whatever the padded entry computes (NaN included). GDN
    only: SGLang's Mamba2 ``selective_state_update`` stores no intermediate state for an entry whose slot is the pad
    slot, so the same broken rows reach no row there (the mamba2 cases above stay green with this breakage)."""
    seed = random.SystemRandom().randrange(2**31)
    gen = torch.Generator().manual_seed(seed)
    w = World(D, torch.float32, True, gen, "gdn")
    rows, slots, rpi, batch_slots, victims = _case(seed, 4, 3)
    victim = victims[0]
    real = bookkeeping.seed_index.seeded_rows

    def broken(req_pool_indices, slots_, accepted, pitch):
        got_rows, seeds = real(req_pool_indices, slots_, accepted, pitch)
        return torch.where(slots_ < 0, torch.full_like(got_rows, victim), got_rows), seeds

    monkeypatch.setattr(bookkeeping.seed_index, "seeded_rows", broken)
    _poison(w, rows, slots, gen)
    w.inter_ssm[0, victim] = torch.randn(w.inter_ssm[0, victim].shape, generator=gen).to(DEVICE)
    before = w.inter_ssm[0, victim].clone()
    drafts = torch.randn(4, D, DIM, generator=gen)
    _run_padded(w, drafts, rpi, batch_slots, graph)
    assert not _same_bits(w.inter_ssm[0, victim], before), f"seed {seed}: the broken padding did not write row {victim}"
