"""Pure-PyTorch model of the stock commit and of the zero-copy commit of ``docs/zero-copy.md`` (issue 29, stage 1).

No SGLang, no Triton: a toy recurrent verify with the indexing of SGLang's verify kernels, a scheduler that draws
one event schedule (joins with chunked prefills, finishes, retractions with re-prefill, streaming-session
hand-offs, reordered and padded batches, accept lengths 1..D), and two worlds that replay it:

* ``stock``: the verify seeds from ``temporal[slot]``, writes the per-step scratch at the batch position, and the
  commit copies the accepted step (SSM and conv) into the slot;
* ``zero_copy``: scratch rows are ``req_pool_idx`` (row 0 the discard row), the verify seeds from scratch
  ``[row, accepted[row] - 1]``, the commit moves only the conv window and sets ``accepted``; an extend stages
  ``temporal[slot]`` into ``[row, 0]``; a streaming-session hand-off is materialized into ``temporal[slot]`` at the
  start of the next extend forward.

``FAULTS`` are deliberate mistakes in the zero-copy world (negative controls).

The radix cache on (docs/zero-copy.md §12, review fix R11) is the second half of this module, :func:`run_radix`: the
same :class:`Model`, but SGLang 0.5.23's own pool and CPU bookkeeping (``extra_buffer`` or ``extra_buffer_lazy``, with
or without retraction), SGLang's own stable-row commit as the stock world and the plugin's commit (its wrapper of
SGLang's commit, the route's ``ZeroCopy.commit`` with a track set; ``ZeroCopy.stage_in`` after every prefill) as the
zero-copy one; ``RADIX_FAULTS`` are its negative controls (those in ``patches/faults.py`` installed as a server does).
It imports SGLang and Triton when called.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

FAULTS = (
    "no_stage_in",  # the extend does not stage temporal[slot] into scratch [row, 0]
    "seed_column_0",  # the verify seeds from column 0 instead of accepted - 1
    "no_accepted_update",  # the commit leaves `accepted` alone
    "batch_position_rows",  # scratch rows stay batch positions (SGLang's default), with reordering
    "no_materialize",  # the session hand-off is not materialized before the next turn's extend
    "padding_to_pool_size",  # padded entries write row `size` (SGLang's PP mapping, H3) instead of row 0
)


@dataclass(frozen=True)
class Shape:
    kind: str  # "gdn": state [H, K, V], gated delta rule; "mamba2": state [H, P, N], selective state update
    heads: int
    state: tuple[int, int]
    dim: int  # conv channels
    conv_k: int  # conv kernel width; the window holds conv_k - 1 columns
    drafts: int  # D: tokens per verify, accept length 1..D
    ssm_dtype: torch.dtype = torch.float32
    conv_dtype: torch.dtype = torch.float32

    @property
    def id(self) -> str:
        a, b = self.state
        names = {torch.float32: "fp32", torch.bfloat16: "bf16"}
        return (
            f"{self.kind}-H{self.heads}x{a}x{b}-dim{self.dim}-k{self.conv_k}-D{self.drafts}"
            f"-ssm_{names[self.ssm_dtype]}-conv_{names[self.conv_dtype]}"
        )


class Model:
    """Fixed random weights; one token step = a causal conv step, then one SSM step that reads the state."""

    def __init__(self, shape: Shape, gen: torch.Generator):
        self.shape = shape
        h, (a, b), d = shape.heads, shape.state, shape.dim

        def w(*size: int, scale: float = 1.0) -> torch.Tensor:
            return torch.randn(*size, generator=gen) * scale

        self.conv_w = w(d, shape.conv_k, scale=0.5)
        s = d**-0.5
        if shape.kind == "gdn":
            self.wq, self.wk, self.wv = w(d, h * a, scale=s), w(d, h * a, scale=s), w(d, h * b, scale=s)
            self.wg, self.wb = w(d, h, scale=s), w(d, h, scale=s)
        else:
            self.wx, self.wB, self.wC = w(d, h * a, scale=s), w(d, b, scale=s), w(d, b, scale=s)
            self.wdt, self.a_log, self.d_skip = w(d, h, scale=s), w(h, scale=0.5), w(h)

    def zero_state(self) -> torch.Tensor:
        return torch.zeros(self.shape.heads, *self.shape.state)

    def conv_step(self, window: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        full = torch.cat([window, x.to(window.dtype)[:, None]], dim=1)
        return F.silu((full.float() * self.conv_w).sum(-1)), full[:, 1:].clone()

    def ssm_step(self, state: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, (a, b) = self.shape.heads, self.shape.state
        if self.shape.kind == "gdn":
            q = (y @ self.wq).view(h, a)
            k = F.normalize((y @ self.wk).view(h, a), dim=-1)
            v = (y @ self.wv).view(h, b)
            g, beta = torch.sigmoid(y @ self.wg), torch.sigmoid(y @ self.wb)
            state = g[:, None, None] * state
            pred = torch.einsum("hk,hkv->hv", k, state)
            state = state + beta[:, None, None] * k[:, :, None] * (v - pred)[:, None, :]
            return state, torch.einsum("hk,hkv->hv", q, state)
        x = (y @ self.wx).view(h, a)
        bb, cc = y @ self.wB, y @ self.wC
        dt = F.softplus(y @ self.wdt)
        decay = torch.exp(dt * -torch.exp(self.a_log))
        state = decay[:, None, None] * state + (dt[:, None] * x)[:, :, None] * bb[None, None, :]
        return state, state @ cc + self.d_skip[:, None] * x

    def prefill(self, ssm: torch.Tensor, conv: torch.Tensor, tokens: torch.Tensor):
        """An extend chunk from the stored state: returns the stored final state, window and per-token outputs."""
        state, window, outs = ssm.float().clone(), conv.clone(), []
        for x in tokens:
            y, window = self.conv_step(window, x)
            state, o = self.ssm_step(state, y)
            outs.append(o)
        return state.to(self.shape.ssm_dtype), window, torch.stack(outs)

    def verify(self, ssm_src, seed, conv, slots, drafts, inter_ssm, inter_conv, rows, pad_guard: bool):
        """The verify kernels' indexing, entry by entry (§1): seed ``ssm_src[seed[n]]`` (zero when negative) is read
        before any store; step t is stored at scratch ``[rows[n], t]`` (no store when ``rows[n] < 0``, nor for a
        padded entry when ``pad_guard``, Mamba2's guard); the conv reads ``conv[slot]``, skips padded entries and
        writes the all-accepted window back to ``conv[slot]``."""
        outs = []
        for n in range(len(seed)):
            idx, slot, row = seed[n], slots[n], rows[n]
            state = ssm_src[idx].float().clone() if idx >= 0 else self.zero_state()
            window = conv[slot].clone() if slot >= 0 else None
            per = []
            for t in range(drafts.shape[1]):
                if window is not None:
                    y, window = self.conv_step(window, drafts[n, t])
                    if row >= 0:
                        inter_conv[row, t] = window
                else:
                    y = torch.zeros(self.shape.dim)
                state, o = self.ssm_step(state, y)
                if row >= 0 and not (pad_guard and idx < 0):
                    inter_ssm[row, t] = state.to(self.shape.ssm_dtype)
                per.append(o)
            if window is not None:
                conv[slot] = window
            outs.append(torch.stack(per))
        return outs


# ---------------------------------------------------------------- the event schedule (shared by both worlds)


@dataclass
class Extend:
    rid: int
    row: int
    slot: int
    init: tuple[torch.Tensor, torch.Tensor] | None  # a join's initial (ssm, conv) state; None: continue from the slot
    chunk: torch.Tensor  # [L, dim]


@dataclass
class Verify:
    entries: list[tuple[int, int, int] | None]  # (rid, row, slot) in batch order; None: a padded entry
    drafts: torch.Tensor  # [B, D, dim]
    accept: list[int]  # accept length per entry, 1..D (0 for padding)


@dataclass
class Step:
    leaves: list[tuple[str, int, int, int]] = field(default_factory=list)  # (finish|retract|session, rid, row, slot)
    extends: list[Extend] = field(default_factory=list)
    verify: Verify | None = None


@dataclass
class _Req:
    init: tuple[torch.Tensor, torch.Tensor]
    history: list[torch.Tensor]
    row: int = -1
    slot: int = -1
    status: str = "prefill"
    due: int = 0
    chunks: list[tuple[torch.Tensor, bool]] = field(default_factory=list)  # (chunk, first chunk of a fresh join)


def make_schedule(shape: Shape, seed: int, steps: int = 60, rows: int = 8, slots: int = 11, chunk: int = 4):
    """Random events for ``steps`` steps; rows ``1..rows`` and slots ``0..slots-1`` are allocated at random (row
    ``rows``, the pool size, often). A retraction, a session hand-off and a finish are forced from step
    ``steps // 3`` on if the draws have not made one yet. Returns the steps and the event counts."""
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    d = shape.dim
    reqs: dict[int, _Req] = {}
    free_rows, free_slots = list(range(1, rows + 1)), list(range(slots))
    running: list[int] = []
    counts: Counter[str] = Counter()

    def randn(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=gen)

    def allocate(r: _Req) -> bool:
        if not free_rows or not free_slots:
            return False
        r.row = max(free_rows) if rng.random() < 0.3 else rng.choice(free_rows)
        r.slot = rng.choice(free_slots)
        free_rows.remove(r.row)
        free_slots.remove(r.slot)
        return True

    def queue_prefill(r: _Req, tokens: torch.Tensor, fresh: bool) -> None:
        parts = list(torch.split(tokens, chunk))
        r.chunks = [(c, fresh and i == 0) for i, c in enumerate(parts)]
        r.status = "prefill"
        counts["chunked_prefill"] += len(parts) > 1

    out: list[Step] = []
    for step in range(steps):
        ev = Step()
        for rid in list(running):
            r, u = reqs[rid], rng.random()
            kind = "finish" if u < 0.04 else "retract" if u < 0.07 else "session" if u < 0.10 else None
            if kind is None and step >= steps // 3:  # every kind of leave at least once, whatever the draws
                kind = next((k for k in ("retract", "session", "finish") if not counts[k]), None)
            if kind is None:
                continue
            running.remove(rid)
            ev.leaves.append((kind, rid, r.row, r.slot))
            counts[kind] += 1
            if kind != "session":
                free_rows.append(r.row)
                free_slots.append(r.slot)
            r.status, r.due = ("done", 0) if kind == "finish" else (kind, step + rng.randint(1, 4))
        for r in reqs.values():
            if r.status == "retract" and r.due <= step and allocate(r):
                queue_prefill(r, torch.stack(r.history), fresh=True)  # recompute from the join state
                counts["rejoin"] += 1
            elif r.status == "session" and r.due <= step:
                turn = randn(rng.randint(1, 6), d)
                r.history.extend(turn)
                queue_prefill(r, turn, fresh=False)  # the next turn extends from temporal[slot]
                counts["next_turn"] += 1
        while rng.random() < 0.4 and len(reqs) < 64:
            init = (
                randn(shape.heads, *shape.state).to(shape.ssm_dtype),
                randn(d, shape.conv_k - 1).to(shape.conv_dtype),
            )
            r = _Req(init=init, history=list(randn(rng.randint(1, 10), d)))
            if not allocate(r):
                break
            reqs[len(reqs)] = r
            queue_prefill(r, torch.stack(r.history), fresh=True)
            counts["join"] += 1
        for rid, r in reqs.items():
            if r.status == "prefill":
                c, fresh = r.chunks.pop(0)
                ev.extends.append(Extend(rid, r.row, r.slot, r.init if fresh else None, c))
                if not r.chunks:
                    r.status = "running"
                    running.append(rid)  # merge_batch appends
        if running:
            if rng.random() < 0.5:
                before = list(running)
                rng.shuffle(running)
                counts["reorder"] += running != before
            n = len(running)
            bucket = next(b for b in (1, 2, 4, 8, 16) if b >= n) if rng.random() < 0.7 else n
            counts["padded"] += bucket > n
            entries: list[tuple[int, int, int] | None] = [(i, reqs[i].row, reqs[i].slot) for i in running]
            entries += [None] * (bucket - n)
            drafts = randn(bucket, shape.drafts, d)
            accept = [rng.randint(1, shape.drafts) for _ in running] + [0] * (bucket - n)
            for i, (rid, acc) in enumerate(zip(running, accept)):
                reqs[rid].history.extend(drafts[i, :acc])
                counts[f"accept_{acc}"] += 1
            ev.verify = Verify(entries, drafts, accept)
            counts["verify"] += 1
        out.append(ev)
    return out, counts


# ---------------------------------------------------------------- the two worlds


@dataclass
class Trace:
    outputs: dict[tuple[int, str, int], torch.Tensor]  # (step, "extend"|"verify", rid) -> outputs
    states: dict[tuple[int, str, int], tuple[torch.Tensor, torch.Tensor]]  # (step, event, rid) -> (ssm, conv)
    md5: str
    counters: Counter[str]


def run(model: Model, schedule: list[Step], scheme: str, fault: str | None = None, rows: int = 8, slots: int = 11):
    """Replay ``schedule`` through ``scheme`` ("stock" or "zero_copy", optionally with one of ``FAULTS``)."""
    assert scheme in ("stock", "zero_copy") and (fault is None or (scheme == "zero_copy" and fault in FAULTS))
    sh, zc = model.shape, scheme == "zero_copy"
    dd = sh.drafts
    temporal = torch.zeros(slots, sh.heads, *sh.state, dtype=sh.ssm_dtype)
    conv = torch.zeros(slots, sh.dim, sh.conv_k - 1, dtype=sh.conv_dtype)
    inter_ssm = torch.zeros(rows + 1, dd, sh.heads, *sh.state, dtype=sh.ssm_dtype)  # [S+1, D, ...]
    inter_conv = torch.zeros(rows + 1, dd, sh.dim, sh.conv_k - 1, dtype=sh.conv_dtype)
    accepted = torch.ones(rows + 1, dtype=torch.int32)
    handoff: list[tuple[int, int, int]] = []  # (rid, row, slot) queued at a session hand-off (§2.6)
    outputs: dict = {}
    states: dict = {}
    counters: Counter[str] = Counter()
    md5 = hashlib.md5()

    def live(row: int, slot: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The request's current (ssm, conv) state: a test-only materialization (``materialize_all_live``)."""
        ssm = inter_ssm[row, int(accepted[row]) - 1] if zc else temporal[slot]
        return ssm.clone(), conv[slot].clone()

    def emit(key: tuple[int, str, int], value: torch.Tensor) -> None:
        outputs[key] = value
        md5.update(value.float().numpy().tobytes())

    for step, ev in enumerate(schedule):
        for kind, rid, row, slot in ev.leaves:  # finish / retract read nothing (R7, R8); session queues (R10)
            states[(step, kind, rid)] = live(row, slot)
            if zc and kind == "session":
                handoff.append((rid, row, slot))
        if ev.extends:
            if zc:  # materialize the hand-off queue at the start of the next target extend forward
                for rid, row, slot in handoff:
                    if fault != "no_materialize":
                        temporal[slot] = inter_ssm[row, int(accepted[row]) - 1]
                        counters["materialize"] += 1
                    states[(step, "handoff_temporal", rid)] = (temporal[slot].clone(), conv[slot].clone())
                handoff.clear()
            else:
                for rid, slot in _queued_sessions(schedule, step):  # stock: nothing to do; the same record
                    states[(step, "handoff_temporal", rid)] = (temporal[slot].clone(), conv[slot].clone())
            for e in ev.extends:
                if e.init is not None:  # a join: clear_slots / the initial state, then the first chunk
                    temporal[e.slot], conv[e.slot] = e.init
                temporal[e.slot], conv[e.slot], o = model.prefill(temporal[e.slot], conv[e.slot], e.chunk)
                emit((step, "extend", e.rid), o)
            if zc and fault != "no_stage_in":  # stage-in after the last layer of the extend forward (§2.5)
                for e in ev.extends:
                    inter_ssm[e.row, 0] = temporal[e.slot]
                    accepted[e.row] = 1
                    counters["stage_in"] += 1
        v = ev.verify
        if v is None:
            continue
        real = [x for x in v.entries if x is not None]
        slot_idx = [x[2] if x else -1 for x in v.entries]
        if not zc:
            rows_w = list(range(len(v.entries)))  # batch positions (GDN arange, Mamba2 arange, §1)
            ssm_src, seed = temporal, slot_idx
        else:
            pad_row = rows if fault == "padding_to_pool_size" else 0
            if fault == "batch_position_rows":
                rows_w = [i if x else pad_row for i, x in enumerate(v.entries)]
            else:
                rows_w = [x[1] if x else pad_row for x in v.entries]  # §2.1
            col = [0 if fault == "seed_column_0" else int(accepted[r]) - 1 for r in rows_w]
            seed = [r * dd + c if x else -1 for r, c, x in zip(rows_w, col, v.entries)]  # §2.3
            ssm_src = inter_ssm.view((rows + 1) * dd, sh.heads, *sh.state)
            counters["seeded_verify"] += len(real)
        outs = model.verify(
            ssm_src, seed, conv, slot_idx, v.drafts, inter_ssm, inter_conv, rows_w, pad_guard=sh.kind == "mamba2"
        )
        for x, o in zip(v.entries, outs):
            if x is not None:
                emit((step, "verify", x[0]), o)
        for n, (x, acc) in enumerate(zip(v.entries, v.accept)):  # the commit, rows in the verify's order
            if x is None:
                continue
            _rid, _row, slot = x
            conv[slot] = inter_conv[rows_w[n], acc - 1]
            if zc:
                if fault != "no_accepted_update":
                    accepted[rows_w[n]] = acc
            else:
                temporal[slot] = inter_ssm[rows_w[n], acc - 1]
                counters["ssm_commits"] += 1
        for rid, row, slot in real:
            states[(step, "live", rid)] = live(row, slot)
    return Trace(outputs, states, md5.hexdigest(), counters)


def _queued_sessions(schedule: list[Step], step: int) -> list[tuple[int, int]]:
    """(rid, slot) of the session hand-offs since the previous extend forward (what zero-copy has queued)."""
    queued: list[tuple[int, int]] = []
    for s in range(step, -1, -1):
        if s < step and schedule[s].extends:
            break
        queued[:0] = [(rid, slot) for kind, rid, _row, slot in schedule[s].leaves if kind == "session"]
    return queued


# ---------------------------------------------------------------- the radix cache on (§12, review fix R11)
#
# Two worlds over SGLang 0.5.23's own CPU bookkeeping, each on a real ``HybridReqToTokenPool`` with
# ``enable_mamba_extra_buffer`` (two ping-pong track slots per request, overlap's sizing):
#
# * ``stock``: the verify seeds from ``temporal[slot]`` and writes the scratch at row ``req_pool_idx``; the commit is
#   SGLang's own ``HybridLinearAttnBackend.update_mamba_state_after_mtp_verify`` on its pipeline-parallel stable-row
#   path (``scatter_mamba_states_after_mtp_verify(..., src_indices_raw=req_pool_indices)``): no plugin code;
# * ``zero_copy``: the verify seeds from scratch ``[row, accepted[row] - 1]``; the commit is SGLang's
#   ``update_mamba_state_after_mtp_verify`` with the plugin applied (its wrapper, the route's committer
#   ``ZeroCopy.commit``), one launch with the track set (conv windows and ``accepted`` for accept rows, conv windows and
#   SSM state of ``steps_to_track`` for track rows, source rows ``req_pool_indices``); an extend stages in.
#
# Both worlds run SGLang's ``pool.alloc`` (row, live slot, ping-pong slots), ``prepare_mamba_track_for_verify`` /
# ``set_mamba_track_indices_from_reqs`` (the track slots), ``_verify_commit_step_indices`` (accept and track steps),
# ``_mamba_prefix_cache_update`` (the ping-pong swap at a crossing), ``MambaComponent._select_finished_checkpoint``
# (which slot a finish gives the tree), ``MambaComponent.cleanup_after_caching_req`` / ``free_mamba_cache`` (keeping
# that slot, or none: a retraction), ``mamba_pool.clear_slots`` and ``copy_from`` (a join's clear, or its
# copy-on-write from the tree). With ``extra_buffer_lazy`` (``RadixConfig.strategy``) also
# ``ScheduleBatch.mamba_lazy_spec_prepare`` (a pending track slot allocated where a crossing is reachable) and, inside
# ``_mamba_prefix_cache_update``, ``_mamba_lazy_spec_update`` (the crossing confirmed and the pending slot promoted to
# keep, or a finish's checkpoint withheld). With ``RadixConfig.retract`` a running request is retracted as
# ``retract_decode`` does (released without a checkpoint; under overlap its in-flight result is dropped) and re-joins
# later with its whole text so far. Re-stated, not called (each marked where it is done): the lazy finish's
# ``checkpoint=req.mamba_lazy_checkpoint``, the fields ``Req.reset_for_retract`` resets, the lazy half of
# ``spec_prepare_for_decode``. The tree is a dict from token prefixes to slots (longest-prefix match, oldest
# evicted); the recurrence is :class:`Model`'s.

RADIX_FAULTS = (
    "zc_no_track",  # the zero-copy commit drops its track rows: tree slots stay stale
    "track_from_pool",  # the track SSM state is read from temporal[slot] (stale under zero-copy; HR2)
    "track_batch_rows",  # the track source rows are batch positions, with reordering (HR1)
    "track_column_live",  # the track reads the accepted column instead of steps_to_track
    "track_sets_accepted",  # a track row also stores accepted[row] = t + 1 (R7)
    "track_no_conv",  # the track rows copy the SSM state but not the conv windows (R7)
    "rejoin_no_stage_in",  # a retracted request's re-prefill skips the stage-in (its row seeds from stale scratch)
)
#: the faults only a workload with retraction reaches
RADIX_RETRACT_FAULTS = ("rejoin_no_stage_in",)
RADIX_STRATEGIES = ("extra_buffer", "extra_buffer_lazy")


@dataclass(frozen=True)
class RadixConfig:
    kind: str = "mamba2"  # the recurrence of Model ("gdn" or "mamba2")
    layers: int = 2
    heads: int = 2
    head_dim: int = 3
    state_size: int = 5
    conv_dim: int = 12
    conv_k: int = 4
    drafts: int = 4  # D
    interval: int = 8  # mamba_track_interval (and the chunk size): a crossing every 8 tokens
    rows: int = 6  # the pool's requests (max running requests); scratch rows 0..rows
    slots: int = 36  # mamba slots: live + 2 ping-pong per request, and the tree's
    tree_size: int = 8  # tree entries kept; the oldest is evicted (its slot freed)
    vocab: int = 64
    ssm_dtype: torch.dtype = torch.float32
    conv_dtype: torch.dtype = torch.float32
    #: SGLang's ``mamba_radix_cache_strategy``: ``extra_buffer`` (two ping-pong track slots per request) or
    #: ``extra_buffer_lazy`` (one; the second allocated for a reachable crossing; SGLang allows it with overlap only)
    strategy: str = "extra_buffer"
    #: the chance, per step, that one running request is retracted (SGLang's ``retract_decode``); 0: never
    retract: float = 0.0
    #: lazy only: SGLang's own test switch ``SGLANG_TEST_MAMBA_LAZY_ALLOC_FAIL`` (every pending-slot allocation fails,
    #: as when the mamba pool is full: SGLang does not evict for it), so a crossing is tracked in place, into the keep
    #: slot, and the keep slot's checkpoint is withdrawn
    lazy_alloc_fail: bool = False

    @property
    def lazy(self) -> bool:
        return self.strategy == "extra_buffer_lazy"


#: a workload that has not covered :func:`radix_coverage` after ``steps`` steps runs on, up to this many times
#: ``steps``: a seed's draws alone may withhold every lazy checkpoint, or finish too late for a next turn (1 of 1,800
#: fresh seeds over the six radix cases on 2026-12-05, none left uncovered with the extension; one CI run drew one)
RADIX_EXTEND = 3


def radix_coverage(cfg: RadixConfig, overlap: bool) -> tuple[str, ...]:
    """The counters a radix workload must have made non-zero for the comparison to mean what it claims: tracked
    boundaries in reordered batches; decode-tracked states inserted into the tree and read back by a copy-on-write
    (not where the lazy allocation fails: the keep slot's checkpoint is withdrawn at most crossings); under overlap, an
    in-flight verify of a finished request; the lazy bookkeeping's own paths; retraction and re-join."""
    need = ["track_rows", "reorder", "verify"]
    if not cfg.lazy_alloc_fail:
        need += ["tree_insert", "decode_tracked_insert", "cow"]
    if overlap:
        need.append("inflight_after_finish")
    if cfg.lazy_alloc_fail:
        need.append("lazy_in_place")
    elif cfg.lazy:
        need += ["lazy_prealloc", "lazy_promote"]
    if cfg.retract:
        need += ["retract", "rejoin"]
    return tuple(need)


def publish_radix_args(cfg: RadixConfig):
    """Publish SGLang 0.5.23 server args for the radix cache on with ``cfg.strategy`` (``extra_buffer`` or
    ``extra_buffer_lazy``), NEXTN with ``D`` draft tokens and a track grid of ``cfg.interval``; returns a function
    that restores what was published."""
    from sglang.srt.runtime_context import get_context, get_exec, get_server_args, mamba_track_grid
    from sglang.srt.server_args import ServerArgs

    try:
        before = get_server_args()
    except Exception:  # noqa: BLE001 - nothing published yet
        before = None
    sa = ServerArgs(
        model_path="dummy",
        speculative_algorithm="NEXTN",
        speculative_eagle_topk=1,
        speculative_num_steps=cfg.drafts - 1,
        speculative_num_draft_tokens=cfg.drafts,
        max_running_requests=cfg.rows,
        mamba_track_interval=cfg.interval,
        mamba_radix_cache_strategy=cfg.strategy,
    )
    sa._mamba_cache_chunk_size = cfg.interval  # a fixture's chunk size: no model config is read
    get_context().set_server_args(sa)
    mamba = get_exec().mamba
    assert cfg.strategy in RADIX_STRATEGIES, cfg.strategy
    assert mamba.enable_mamba_extra_buffer and bool(mamba.enable_mamba_extra_buffer_lazy) == cfg.lazy
    assert mamba_track_grid(1) == cfg.interval, mamba_track_grid(1)

    def restore() -> None:
        if before is not None:
            get_context().set_server_args(before)

    return restore


class _RadixReq:
    """What SGLang's CPU functions read of a ``Req``: its ``kv`` record (SGLang's own ``ReqKvInfo``), ``seqlen``,
    ``finished()``, ``is_retracted`` and ``mamba_lazy_checkpoint``. ``text``: the tokens whose states the device has
    committed (a verify's ``seq_lens`` is ``len(text)``); ``cpu_len``: as far as the results processed on the host go,
    SGLang's ``kv.kv_committed_len`` (``seqlen`` is one more: the bonus token not yet consumed). Under overlap ``text``
    runs one verify ahead of ``cpu_len``."""

    def __init__(self, rid: int, text: list[int], max_new: int, kv_cls):
        self.rid, self.text, self.max_new, self.generated = rid, list(text), max_new, 0
        self.kv = kv_cls()
        self.prompt_len = self.cpu_len = len(text)
        self.done = False
        self.is_retracted = False
        self.rejoin_due = 0  # a retracted request's step to re-join from
        self.mamba_lazy_checkpoint = True  # SGLang's Req field: a lazy finish may turn it off (no tree insert)

    @property
    def cpu_len(self) -> int:
        return self.kv.kv_committed_len

    @cpu_len.setter
    def cpu_len(self, value: int) -> None:
        self.kv.kv_committed_len = value

    @property
    def seqlen(self) -> int:
        return self.cpu_len + 1

    def finished(self) -> bool:
        return self.done


@dataclass
class RadixTrace:
    outputs: dict[tuple, torch.Tensor]  # (step, "prefill"|"verify", rid) -> outputs (every layer)
    states: dict[tuple, tuple[torch.Tensor, torch.Tensor]]  # (step, what, rid) -> (ssm, conv) of every layer
    md5: str  # of every output, in order
    counters: Counter[str]
    events: dict = field(default_factory=dict)  # the plugin's status-report events at the end (zero-copy world)
    steps: int = 0  # the steps run: ``steps`` asked for, more where the workload had not covered enough by then


def _env(name: str, value: str):
    """``os.environ[name] = value`` for a ``with`` block (the previous value put back after)."""
    import contextlib
    import os

    @contextlib.contextmanager
    def scope():
        old = os.environ.get(name)
        os.environ[name] = value
        try:
            yield
        finally:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old

    return scope()


def run_radix(
    cfg: RadixConfig, seed: int, scheme: str, fault: str | None = None, steps: int = 40, overlap: bool = True
) -> RadixTrace:
    """Replay one seeded random workload through ``scheme`` ("stock" or "zero_copy", optionally with one of
    ``RADIX_FAULTS``); :func:`publish_radix_args` must have been called. Every decision is drawn on the host from
    ``seed`` and SGLang's CPU bookkeeping, never from state values, so both worlds take the same path. ``overlap``:
    the results of verify N are processed after verify N+1 was planned and committed (SGLang's overlap schedule: N+1
    tracks into the slot planned before N's ping-pong swap, and a request that finishes at N verifies once more)."""
    import contextlib

    from sglang_mamba_dedup.patches import faults
    from tests.support import integration as iu

    with contextlib.ExitStack() as stack:
        if scheme == "stock":  # SGLang's scatter wrappers on CPU tensors, and its pipeline-parallel stable rows
            stack.enter_context(iu.cpu_stock_paths("cpu"))
            bk = iu.backend_module()
            stack.callback(setattr, bk, "pp_spec_stable_rows_enabled", bk.pp_spec_stable_rows_enabled)
            bk.pp_spec_stable_rows_enabled = lambda: True
        else:  # the plugin applied: SGLang's commit is the plugin's wrapper, which calls the pool's committer
            from sglang_mamba_dedup import env, installed

            stack.enter_context(_env(env.ALLOW_CPU, "1"))
            stack.enter_context(iu.plugin(True))
            # zero-copy's own patches too, as a server that asked for it has them: here its host-side counters
            # (the track boundaries SGLang's result processing sees crossed: zc_track_rows; tree evictions)
            stack.enter_context(_env(env.ZERO_COPY, "1"))
            assert installed.apply(["zero_copy"]) == {"zero_copy": None}
            stack.callback(installed.revert, ["zero_copy"], force=True)
            if fault in faults.FAULTS:  # a serving-path negative control: the FAULTS row, as a server installs it
                faults.install(fault)
                stack.callback(faults.remove)
        if cfg.lazy_alloc_fail:
            assert cfg.lazy, "SGLANG_TEST_MAMBA_LAZY_ALLOC_FAIL is read by the lazy strategy only"
            stack.enter_context(_env("SGLANG_TEST_MAMBA_LAZY_ALLOC_FAIL", "1"))
        return _run_radix(cfg, seed, scheme, fault, steps, overlap)


def _run_radix(cfg: RadixConfig, seed: int, scheme: str, fault: str | None, steps: int, overlap: bool) -> RadixTrace:
    import types

    from sglang.srt.managers.schedule_batch import ReqKvInfo, ScheduleBatch
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
    from sglang.srt.mem_cache.unified_cache.components.mamba import MambaComponent
    from sglang.srt.runtime_context import mamba_track_grid, max_speculative_num_draft_tokens
    from sglang.srt.speculative.spec_utils import _verify_commit_step_indices, prepare_mamba_track_for_verify

    from sglang_mamba_dedup.kernels import state_commit
    from tests.support import integration as iu

    assert scheme in ("stock", "zero_copy") and (fault is None or (scheme == "zero_copy" and fault in RADIX_FAULTS))
    assert overlap or not cfg.lazy, "SGLang allows extra_buffer_lazy with the overlap schedule only"
    zc, dd, n_layers = scheme == "zero_copy", cfg.drafts, cfg.layers
    rng = random.Random(seed)
    model = Model(
        Shape(cfg.kind, cfg.heads, (cfg.head_dim, cfg.state_size), cfg.conv_dim, cfg.conv_k, dd, cfg.ssm_dtype),
        torch.Generator().manual_seed(seed + 1),
    )
    embed = torch.randn(cfg.vocab, cfg.conv_dim, generator=torch.Generator().manual_seed(seed + 2))
    cp = iu.make_cache_params(
        num_layers=n_layers,
        conv_dim=cfg.conv_dim,
        conv_kernel=cfg.conv_k,
        num_heads=cfg.heads,
        head_dim=cfg.head_dim,
        state_size=cfg.state_size,
        conv_dtype=cfg.conv_dtype,
        ssm_dtype=cfg.ssm_dtype,
    )
    pool = iu.build_pool(
        cache_params=cp,
        size=cfg.rows,
        mamba_size=cfg.slots,
        draft_tokens=dd,
        topk=1,
        device="cpu",
        extra={
            "enable_mamba_extra_buffer": True,
            "enable_mamba_extra_buffer_lazy": cfg.lazy,  # one ping-pong slot allocated at a join, not two
            "enable_overlap_schedule": True,
        },
    )
    mp = pool.mamba_pool
    cache = mp.mamba_cache
    temporal, conv, inter_ssm = cache.temporal, cache.conv[0], cache.intermediate_ssm
    backend = iu.build_backend(pool, device="cpu", topk=1, draft_tokens=dd)
    publish_radix_args(cfg)  # build_backend published its own (radix off)
    wrapped = hasattr(type(backend).update_mamba_state_after_mtp_verify, "__wrapped__")
    assert wrapped == zc, "the plugin is applied in the zero-copy world only"
    if zc:  # the pool as the gate leaves it: our commit kernel cleared, the zero-copy bookkeeping bound
        from sglang_mamba_dedup import state
        from sglang_mamba_dedup.patches.zero_copy.bookkeeping import ZeroCopy

        ps = state.pool_state(mp)
        ps.commit_ok = True
        ps.zero_copy = ZeroCopy(mp, radix=cfg.strategy)
        accepted = ps.zero_copy.accepted
        accepted.fill_(1)
        plan = state_commit.get_plan(
            cache.conv, cache.intermediate_conv_window, temporal, inter_ssm, accepted=accepted, ssm_track_only=True
        )
        plain_plan = state_commit.get_plan(cache.conv, cache.intermediate_conv_window, temporal, inter_ssm)
    interval = mamba_track_grid(1)
    proc = types.SimpleNamespace(tree_cache=types.SimpleNamespace(page_size=1))
    for name in ("_mamba_check_track_boundary", "_mamba_lazy_spec_update", "mamba_lazy_post_decode_at_boundary"):
        setattr(proc, name, getattr(SchedulerBatchResultProcessor, name).__get__(proc))
    component = types.SimpleNamespace(  # what MambaComponent's methods read of self: no int8 checkpoint pool
        cache=types.SimpleNamespace(req_to_token_pool=pool, enable_mamba_extra_buffer=True), int8_ckpt_pool=None
    )

    outputs: dict = {}
    states: dict = {}
    counters: Counter[str] = Counter()
    md5 = hashlib.md5()
    tree: dict[tuple[int, ...], torch.Tensor] = {}  # token prefix -> slot (shape [1]), oldest first
    running: list[_RadixReq] = []
    retracted: list[_RadixReq] = []
    finished_texts: list[list[int]] = []
    next_rid = 0

    def emit(key, value) -> None:
        outputs[key] = value
        md5.update(value.float().numpy().tobytes())

    def slot_state(slot) -> tuple[torch.Tensor, torch.Tensor]:
        return temporal[:, slot].clone(), conv[:, slot].clone()

    def live_state(req) -> tuple[torch.Tensor, torch.Tensor]:
        row, slot = req.kv.req_pool_idx, int(req.kv.mamba_pool_idx)
        ssm = inter_ssm[:, row, int(accepted[row]) - 1] if zc else temporal[:, slot]
        return ssm.clone(), conv[:, slot].clone()

    def join(step: int, req: _RadixReq) -> None:
        """A prefill of ``req.text`` (a new request, or a retracted one's re-prefill of its whole text so far): the
        row and slots (SGLang's ``pool.alloc``), the longest tree prefix copied on write (or the slot cleared), the
        rest of the text prefilled; zero-copy stages in (the plugin's ``ZeroCopy.stage_in``: ``accepted[row] = 1``)."""
        rejoin = req.is_retracted
        req.is_retracted = False  # prepare_for_extend
        req.cpu_len = len(req.text)
        assert pool.alloc([req]) is not None
        text, slot = req.text, req.kv.mamba_pool_idx.view(1)
        match = max((k for k in tree if len(k) <= len(text) and tuple(text[: len(k)]) == k), key=len, default=())
        if match:  # copy-on-write from the tree node (SGLang's deferred COW, on the forward stream)
            mp.copy_from(tree[match], slot)
            counters["cow"] += 1
            counters["cached_tokens"] += len(match)
            if rejoin:
                counters["rejoin_cow"] += 1
            states[(step, "cow", req.rid)] = slot_state(slot)
        else:
            mp.clear_slots(slot)
        tokens = embed[torch.tensor(text[len(match) :])]
        outs = []
        for layer in range(n_layers):
            temporal[layer, slot[0]], conv[layer, slot[0]], o = model.prefill(
                temporal[layer, slot[0]], conv[layer, slot[0]], tokens
            )
            outs.append(o)
        emit((step, "prefill", req.rid), torch.stack(outs))
        if zc and not (rejoin and fault == "rejoin_no_stage_in"):  # after the extend's last layer, every layer
            ps.zero_copy.stage_in(cache, slot, torch.tensor([req.kv.req_pool_idx]))
        running.append(req)
        counters["rejoin" if rejoin else "join"] += 1

    def release(req: _RadixReq, keep: int | None) -> None:
        """The mamba half of ``release_kv_cache``, SGLang's own ``MambaComponent.cleanup_after_caching_req(
        is_finished=True)`` (after a checkpoint, or through ``UnifiedRadixCache.on_release`` without one): the live
        slot and every ping-pong track slot freed but ``keep`` (the one the tree took), then the row
        (``req_to_token_pool.free``)."""
        taken = None if keep is None else types.SimpleNamespace(mamba_exist=False)
        MambaComponent.cleanup_after_caching_req(
            component,
            req,
            is_finished=True,
            insert_result=taken,
            insert_params=types.SimpleNamespace(mamba_keep_idx=keep),
        )
        pool.free(req)

    def finish(step: int, req: _RadixReq) -> None:
        """``release_kv_cache(checkpoint=True)`` (lazy: ``checkpoint=req.mamba_lazy_checkpoint``): the output is cut at
        ``max_new`` (the tokens accepted past it are dropped: a tracked state may overshoot the key, and SGLang falls
        back to the other ping-pong slot)."""
        running.remove(req)
        key_len = min(req.cpu_len, req.prompt_len + req.max_new)
        keep = None
        # batch_result_processor.py 1458-1464 (_handle_finish_state_updated_req), re-stated: lazy checkpoints only
        # where _mamba_lazy_spec_update left req.mamba_lazy_checkpoint on (no scatter wrote, or may still write, the
        # keep slot); a release without checkpoint inserts nothing
        if cfg.lazy and not req.mamba_lazy_checkpoint:
            counters["lazy_no_checkpoint"] += 1
            checkpoint = None
        else:
            checkpoint = MambaComponent._select_finished_checkpoint(component, req, key_len)
            counters["overshoot"] += (req.kv.mamba_last_track_seqlen or 0) > key_len
        if checkpoint is not None and checkpoint[0] > 0:
            cache_len, keep = checkpoint
            key = tuple(req.text[:cache_len])
            if key in tree:  # the node has its state already: nothing donated
                keep = None
            else:
                slot = req.kv.mamba_ping_pong_track_buffer[keep].view(1).clone()
                tree[key] = slot
                states[(step, "tree_insert", req.rid)] = slot_state(slot)
                counters["tree_insert"] += 1
                counters["decode_tracked_insert"] += cache_len > req.prompt_len
        release(req, keep)
        if checkpoint is not None and checkpoint[0] > 0:  # a next turn extends a text whose prefix the tree holds
            finished_texts.append(req.text[:key_len])
        while len(tree) > cfg.tree_size:  # evict the oldest node
            pool.mamba_allocator.free(tree.pop(next(iter(tree))))
            counters["evict"] += 1

    def retract(step: int, req: _RadixReq) -> None:
        """SGLang's ``ScheduleBatch.retract_decode`` -> ``release_req``: ``release_kv_cache(req, tree_cache,
        checkpoint=False)`` (nothing inserted; the live slot and every ping-pong track slot freed, the row freed),
        then ``Req.reset_for_retract`` (re-stated: ``is_retracted``, ``kv_committed_len = 0``; the output is kept, so
        the re-prefill's text is the prompt and every token accepted on the host so far; under overlap the in-flight
        verify's tokens are not: its result is dropped)."""
        running.remove(req)
        release(req, None)
        req.text = req.text[: req.cpu_len]
        req.cpu_len = 0
        req.is_retracted = True
        req.rejoin_due = step + rng.randint(1, 4)
        retracted.append(req)
        counters["retract"] += 1

    def commit(batch, rpi, slots, last_correct, track_idx, track_steps) -> None:
        if not zc:  # SGLang's own commit, pipeline-parallel stable rows: src_indices_raw = req_pool_indices
            backend.update_mamba_state_after_mtp_verify(
                last_correct, track_idx, track_steps, None, req_pool_indices=rpi
            )
            return
        track = (track_steps, track_idx)
        before = conv[:, track_idx.clamp(min=0)].clone()
        if fault == "track_batch_rows":
            state_commit.launch(plan, ssm=(inter_ssm, temporal), accept=(last_correct, slots), src_rows=rpi)
            positions = torch.arange(rpi.shape[0])
            state_commit.launch(plain_plan, ssm=(inter_ssm, temporal), accept=track, src_rows=positions)
        else:  # the plugin's wrapper of SGLang's commit, through the route's committer (ZeroCopy.commit)
            iu.set_forward_metadata(backend, slots, dd)
            backend.update_mamba_state_after_mtp_verify(
                last_correct, track_idx, track_steps, None, req_pool_indices=rpi
            )
        for n in range(rpi.shape[0]):
            t, k = int(track_steps[n]), int(track_idx[n])
            if t < 0 or k < 0:
                continue
            if fault == "track_from_pool":
                temporal[:, k] = temporal[:, int(slots[n])]
            elif fault == "track_sets_accepted":
                accepted[int(rpi[n])] = t + 1
            elif fault == "track_no_conv":
                conv[:, k] = before[:, n]

    def process_results(step: int, batch, accept: list[int], reqs: list[_RadixReq]) -> None:
        """The host's processing of one verify's results, request by request as SGLang orders it
        (``process_batch_result_decode``): a request finished or retracted since the verify was planned is skipped
        (overlap only), otherwise the output grows (``kv_committed_len``), the finish is decided,
        ``_mamba_prefix_cache_update`` runs (the swap at a crossing; lazy: the crossing confirmed, the pending slot
        promoted, or the checkpoint withheld), then the finish's release."""
        result = types.SimpleNamespace(
            num_correct_drafts_per_req_cpu=[a - 1 for a in accept],
            num_non_draft_tokens_per_req=1,
            grammar_retained_tokens=None,
        )
        for n, (req, a) in enumerate(zip(reqs, accept)):
            if req.done:  # finished at the previous result: this in-flight verify's result is dropped
                counters["inflight_after_finish"] += 1
                continue
            if req.is_retracted:  # retracted after this verify was planned: its result is dropped, its tokens too
                counters["inflight_after_retract"] += 1
                continue
            req.cpu_len += a
            req.generated += a
            req.done = req.generated >= req.max_new
            kv = req.kv
            seen = (kv.mamba_last_track_seqlen, kv.mamba_next_track_idx)
            SchedulerBatchResultProcessor._mamba_prefix_cache_update(proc, req, batch, result, n)
            if cfg.lazy and not req.done and kv.mamba_last_track_seqlen != seen[0]:
                counters["lazy_crossing"] += 1  # _mamba_lazy_spec_update confirmed a crossing: the pending slot
                # became the keep slot (promoted), or the crossing was tracked in place into the keep slot
                counters["lazy_promote" if kv.mamba_next_track_idx != seen[1] else "lazy_in_place"] += 1
            if req.done:
                finish(step, req)

    pending, ran = None, 0
    need = radix_coverage(cfg, overlap)
    for step in range(steps * RADIX_EXTEND):
        if step >= steps and all(counters[k] for k in need):
            break  # ``steps`` at least, then on until the workload has covered what the comparison is for
        ran = step + 1
        if cfg.retract and len(running) > 1:  # retract_decode keeps at least one request
            forced = step >= steps // 3 and not counters["retract"]
            if rng.random() < cfg.retract or forced:
                retract(step, rng.choice(running))
        for req in list(retracted):  # a retracted request re-joins before new ones (it waits at the queue's head)
            if req.rejoin_due <= step and len(running) < cfg.rows:
                retracted.remove(req)
                join(step, req)
        # past the middle with a finished text in the tree but no prefix hit yet, one next turn joins for sure (a
        # seed's draws alone may never read a decode-tracked tree state back: what the comparison must cover)
        force_turn = step >= steps // 2 and bool(finished_texts) and not counters["cow"]
        while len(running) < cfg.rows and (force_turn or rng.random() < 0.5):
            if finished_texts and (force_turn or rng.random() < 0.6):  # a next turn: the whole earlier text, then new
                earlier = finished_texts[-1] if force_turn else rng.choice(finished_texts[-4:])  # newest: in the tree
                force_turn = False
                text = earlier + [rng.randrange(cfg.vocab) for _ in range(rng.randint(1, 4))]
                counters["next_turn"] += 1
            else:
                text = [rng.randrange(cfg.vocab) for _ in range(rng.randint(2, 11))]
            join(step, _RadixReq(next_rid, text, rng.randint(8, 28), ReqKvInfo))
            next_rid += 1
        if not running:
            continue
        if rng.random() < 0.5:  # filter / merge reorder the batch: rows stop matching batch positions
            rng.shuffle(running)
            counters["reorder"] += 1
        rpi = torch.tensor([r.kv.req_pool_idx for r in running], dtype=torch.int64)
        slots = pool.get_mamba_indices(rpi)
        batch = types.SimpleNamespace(
            reqs=list(running),
            req_pool_indices=rpi,
            req_to_token_pool=pool,
            seq_lens=torch.tensor([len(r.text) for r in running], dtype=torch.int64),
            tree_cache=proc.tree_cache,
            spec_algorithm=types.SimpleNamespace(is_none=lambda: False),
            mamba_track_buffer_indices=None,
            mamba_track_indices=None,
            mamba_lazy_spec_track_positions_cpu=None,
        )
        if cfg.lazy:  # spec_prepare_for_decode's lazy half (spec_utils.py 1252-1258): SGLang's own track plan
            empty = [list(r.kv.mamba_ping_pong_empty) for r in running]
            ScheduleBatch.mamba_lazy_spec_prepare(batch, interval, max_speculative_num_draft_tokens())
            counters["lazy_prealloc"] += sum(e != r.kv.mamba_ping_pong_empty for e, r in zip(empty, running))
            planned = batch.mamba_lazy_spec_track_positions_cpu
            counters["lazy_pending_planned"] += sum(p != r.kv.mamba_next_track_idx for p, r in zip(planned, running))
        prepare_mamba_track_for_verify(batch)  # the track slots (lazy: at the planned positions)
        # the verify: D tokens per request, every layer; scratch rows req_pool_idx in both worlds (stable rows)
        draft_ids = [[rng.randrange(cfg.vocab) for _ in range(dd)] for _ in running]
        drafts = embed[torch.tensor(draft_ids)]
        rows_w = rpi.tolist()
        seed_idx = [row * dd + int(accepted[row]) - 1 for row in rows_w] if zc else slots.tolist()
        per_layer = []
        for layer in range(n_layers):
            src = inter_ssm[layer].view(-1, *temporal.shape[2:]) if zc else temporal[layer]
            per_layer.append(
                model.verify(
                    src,
                    seed_idx,
                    conv[layer],
                    slots.tolist(),
                    drafts,
                    inter_ssm[layer],
                    cache.intermediate_conv_window[0][layer],
                    rows_w,
                    False,
                )
            )
        for n, req in enumerate(running):
            emit((step, "verify", req.rid), torch.stack([per_layer[layer][n] for layer in range(n_layers)]))
        accept = [rng.randint(1, dd) for _ in running]
        accept_lens = torch.tensor(accept, dtype=torch.int32)
        accept_index = torch.tensor(
            [[n * dd + j if j < a else -1 for j in range(dd)] for n, a in enumerate(accept)], dtype=torch.int32
        )
        last_correct, track_steps = _verify_commit_step_indices(
            batch=batch, accept_index=accept_index, accept_lens=accept_lens, draft_token_num=dd
        )
        track_idx = batch.mamba_track_indices
        commit(batch, rpi, slots, last_correct, track_idx, track_steps)
        for n, req in enumerate(running):
            if int(track_steps[n]) >= 0 and int(track_idx[n]) >= 0:
                states[(step, "track", req.rid)] = slot_state(int(track_idx[n]))
                counters["track_rows"] += 1
            states[(step, "live", req.rid)] = live_state(req)
        for n, (req, a) in enumerate(zip(running, accept)):
            req.text.extend(draft_ids[n][:a])
        counters["verify"] += 1
        current = (batch, accept, list(running))
        if overlap:  # N's results after N+1 was planned and committed
            if pending is not None:
                process_results(step, *pending)
            pending = current
        else:
            process_results(step, *current)
    if zc:
        from sglang_mamba_dedup import report

        return RadixTrace(outputs, states, md5.hexdigest(), counters, report.events(), ran)
    return RadixTrace(outputs, states, md5.hexdigest(), counters, steps=ran)
