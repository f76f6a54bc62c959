"""The zero-copy commit through SGLang 0.5.23's own GDN verify kernels and the plugin's own zero-copy code, stock vs
zero-copy bit-exact over a random schedule (docs/zero-copy.md section 9, "the same through SGLang's own kernels").

Both worlds run SGLang's Triton ``causal_conv1d_update`` and ``TritonGDNKernel.target_verify`` (its
``fused_sigmoid_gating_delta_rule_update``; under ``TRITON_INTERPRET=1`` on the CPU), with the rows from
``gdn_backend.select_verify_intermediate_state_indices``: as SGLang ships them in the stock world, through the
plugin's wrappers (Z2, Z3) in the zero-copy world. The stock commit is a PyTorch reference of SGLang's scatter; the
zero-copy commit is the plugin's ``_Route.commit`` bound to ``ZeroCopy.commit`` (our Triton kernel, conv only,
``accepted`` stored by the same launch); rows and seeds come from ``ZeroCopy.verify_tables`` (the seed-index kernel); extends write
``temporal``/``conv`` (a deterministic function of the old state) and zero-copy stages in with ``ZeroCopy.stage_in``
(the commit kernel, all layers); session hand-offs go through ``ZeroCopy.materialize``. The schedule (joins, chunked prefills,
finishes, retractions, hand-offs, reorders, CUDA-graph-style padding with slot -1 / row 0, accept lengths 1..D) is
``tests/support/zero_copy_sim.make_schedule``'s. Not covered here: the GDN backend's ``forward_extend`` (Z1), CUDA
graphs (the H200 e2e). With a CUDA GPU the same test runs every kernel compiled on CUDA tensors (real tiling,
the commit's direct launch): the H200 simulation of docs/zero-copy.md section 9.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import types

import pytest
import torch

from sglang_mamba_dedup import installed, state, versions
from sglang_mamba_dedup.kernels import descriptor, state_commit
from sglang_mamba_dedup.patches import commit as commit_patch
from sglang_mamba_dedup.patches import faults
from sglang_mamba_dedup.patches.zero_copy import bookkeeping, hooks
from tests.support import integration as iu
from tests.support import zero_copy_sim as sim

pytestmark = [
    *iu.release_only(versions.ZERO_COPY, f"the zero-copy commit is built for SGLang {versions.ZERO_COPY_RELEASE} only"),
]

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # CPU: TRITON_INTERPRET (tests/conftest.py)
ROWS, SLOTS, H, HV, KD, VD, CONV_K = 6, 9, 2, 4, 8, 8, 4
DIM = 2 * H * KD + HV * VD  # q, k, v channels of the conv, as GDN splits them


@pytest.fixture
def zero_copy_patched(monkeypatch):
    if not hasattr(torch.cpu, "device"):  # SGLang's selective_state_update enters a device context (CUDA-only API)
        monkeypatch.setattr(torch.cpu, "device", lambda index: contextlib.nullcontext(), raising=False)
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP", "1")
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP_ZERO_COPY", "1")
    assert installed.apply(["commit", "zero_copy"]) == {"commit": None, "zero_copy": None}
    yield
    faults.remove()
    installed.revert(force=True)


class _World:
    """One layer's pool, scratch and weights; ``zc``: the plugin's zero-copy bookkeeping (None: stock)."""

    def __init__(self, drafts: int, ssm_dtype, zc: bool, gen: torch.Generator, kind: str = "gdn"):
        def r(*shape):
            return torch.randn(*shape, generator=gen).to(DEVICE)

        self.kind = kind  # "gdn": state [HV, V, K]; "mamba2": [heads, head_dim, dstate] (the same sizes here)
        self.temporal = torch.zeros(1, SLOTS, HV, VD, KD, dtype=ssm_dtype, device=DEVICE)
        self.conv = torch.zeros(1, SLOTS, DIM, CONV_K - 1, device=DEVICE)
        self.inter_ssm = torch.zeros(1, ROWS + 1, drafts, HV, VD, KD, dtype=ssm_dtype, device=DEVICE)
        self.inter_conv = torch.zeros(1, ROWS + 1, drafts, DIM, CONV_K - 1, device=DEVICE)
        self.weight, self.bias = r(DIM, CONV_K) * 0.5, r(DIM) * 0.1
        self.A_log, self.dt_bias, self.mix = r(HV) * 0.5, r(HV) * 0.5, r(HV, VD, KD) * 0.1
        self.proj_a, self.proj_b = r(DIM, HV) * 0.2, r(DIM, HV) * 0.2
        self.cache = types.SimpleNamespace(
            temporal=self.temporal,
            intermediate_ssm=self.inter_ssm,
            conv=[self.conv],
            intermediate_conv_window=[self.inter_conv],
        )
        self.pool = types.SimpleNamespace(mamba_cache=self.cache)
        if zc:
            state.pool_state(self.pool).zero_copy = bookkeeping.ZeroCopy(self.pool)
        self.route = commit_patch._Route(None, self.pool, self.cache, None)

    @property
    def zc(self):
        """The pool's zero-copy bookkeeping, None for the stock (or plugin-commit) world."""
        ps = state.pool_state_of(self.pool)
        return ps.zero_copy if ps is not None else None

    def extend(self, e: sim.Extend) -> None:
        """A stand-in prefill chunk: the new state is a fixed function of the stored one and the chunk."""
        if e.init is not None:  # a join: the slot's initial state
            self.temporal[0, e.slot], self.conv[0, e.slot] = e.init
        mean = e.chunk.mean().to(DEVICE)
        self.conv[0, e.slot] = self.conv[0, e.slot] * 0.9 + mean
        self.temporal[0, e.slot] = (self.temporal[0, e.slot].float() * 0.9 + mean * self.mix).to(self.temporal.dtype)

    def verify(
        self, v: sim.Verify, rpi: torch.Tensor, slots: torch.Tensor, default_rows: torch.Tensor, stock_rows=False
    ):
        if self.kind == "mamba2":
            return self._verify_mamba2(v, rpi, slots, stock_rows)
        from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_update
        from sglang.srt.layers.attention.linear import gdn_backend
        from sglang.srt.layers.attention.linear.kernels.gdn_triton import TritonGDNKernel

        b, d = v.drafts.shape[:2]
        zc = self.zc  # Z1: the forward's rows and seeds, built once at its first linear layer
        token = hooks._ACTIVE.set(zc.verify_tables(0, rpi, slots)) if zc is not None else None
        try:
            select = gdn_backend.select_verify_intermediate_state_indices
            if stock_rows:  # negative control: SGLang's batch-position rows under the zero-copy seed
                select = select.__wrapped__
            rows = select(default_rows, rpi, slots >= 0, ROWS)
            y = causal_conv1d_update(
                v.drafts.to(DEVICE).transpose(1, 2).contiguous(),
                self.conv[0],
                self.weight,
                self.bias,
                "silu",
                conv_state_indices=slots,
                intermediate_conv_window=self.inter_conv[0],
                intermediate_state_indices=rows[:b],
            )
            x = y.transpose(1, 2).reshape(b * d, DIM)
            q, k, val = torch.split(x, [H * KD, H * KD, HV * VD], dim=-1)
            out = TritonGDNKernel().target_verify(
                self.A_log,
                self.dt_bias,
                q.reshape(1, b * d, H, KD).contiguous(),
                k.reshape(1, b * d, H, KD).contiguous(),
                val.reshape(1, b * d, HV, VD).contiguous(),
                x @ self.proj_a,
                x @ self.proj_b,
                ssm_states=self.temporal[0],
                cache_indices=slots,
                query_start_loc=torch.arange(0, b + 1, dtype=torch.int32, device=DEVICE) * d,
                intermediate_states_buffer=self.inter_ssm[0],
                intermediate_state_indices=rows,
                cache_steps=d,
                retrieve_parent_token=None,
            )
        finally:
            if token is not None:
                hooks._ACTIVE.reset(token)
        return y, out.reshape(b, d, HV, VD), rows

    def _verify_mamba2(self, v: sim.Verify, rpi: torch.Tensor, slots: torch.Tensor, stock_rows: bool):
        """The Mamba2 mixer's verify: SGLang's Triton conv and ``selective_state_update`` as the mixer calls them,
        through the plugin's Z4 binding wrappers in the zero-copy world (rows and seeds as ``mamba2_forward``
        sets them); stock rows are batch positions (``mamba.py``'s ``arange``, clamped to the scratch here)."""
        from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_update
        from sglang.kernels.ops.mamba.triton_ops.mamba_ssm import selective_state_update

        b, d = v.drafts.shape[:2]
        zc = self.zc
        positions = torch.arange(b, dtype=torch.int32, device=DEVICE).clamp(max=ROWS)
        rows, token = positions, None
        if zc is not None:  # Z4: the forward's tables; the negative control builds them on batch positions
            tables = zc.verify_tables(0, positions if stock_rows else rpi, slots)
            rows, token = tables.rows, hooks._ACTIVE.set(tables)
        conv = (lambda w, i, a, k: w(*a, **k)) if zc is None else hooks.mamba2_conv
        ssm = (lambda w, i, a, k: w(*a, **k)) if zc is None else hooks.mamba2_ssm
        try:
            y = conv(
                causal_conv1d_update,
                None,
                (v.drafts.to(DEVICE).transpose(1, 2).contiguous(), self.conv[0], self.weight, self.bias, "silu"),
                dict(
                    conv_state_indices=slots,
                    intermediate_conv_window=self.inter_conv[0],
                    intermediate_state_indices=positions,
                ),
            )
            x = y.transpose(1, 2)  # [b, d, DIM]: x | B | C
            xs, bm, cm = torch.split(x, [HV * VD, 2 * KD, 2 * KD], dim=-1)
            dt = (x @ self.proj_a)[..., None].expand(b, d, HV, VD).contiguous()
            out = torch.empty(b, d, HV, VD, device=DEVICE)
            ssm(
                selective_state_update,
                None,
                (
                    self.temporal[0],
                    xs.reshape(b, d, HV, VD).contiguous(),
                    dt,
                    -torch.exp(self.A_log)[:, None, None].expand(HV, VD, KD),
                    bm.reshape(b, d, 2, KD).contiguous(),
                    cm.reshape(b, d, 2, KD).contiguous(),
                    self.dt_bias[:, None].expand(HV, VD) * 0 + 0.5,
                ),
                dict(
                    z=None,
                    dt_bias=self.dt_bias[:, None].expand(HV, VD),
                    dt_softplus=True,
                    state_batch_indices=slots,
                    out=out,
                    disable_state_update=True,
                    intermediate_states_buffer=self.inter_ssm[0],
                    cache_steps=d,
                    retrieve_parent_token=None,
                    intermediate_state_indices=positions,
                ),
            )
        finally:
            if token is not None:
                hooks._ACTIVE.reset(token)
        return y, out, rows

    def commit(self, steps, slots, rows, rpi) -> None:
        if self.zc is None:  # SGLang's scatter, in PyTorch: scratch [batch position, step] -> slot
            for n in range(steps.shape[0]):
                if steps[n] >= 0 and slots[n] >= 0:
                    self.temporal[0, slots[n]] = self.inter_ssm[0, rows[n], steps[n]]
                    self.conv[0, slots[n]] = self.inter_conv[0, rows[n], steps[n]]
        else:
            self.route.commit((steps, slots), None, rpi)

    def live(self, row: int, slot: int) -> torch.Tensor:
        zc = self.zc
        if zc is None:
            return self.temporal[0, slot].clone()
        return self.inter_ssm[0, row, int(zc.accepted[row]) - 1].clone()


def replay(schedule, drafts: int, ssm_dtype, zc: bool, seed: int, skip=(), kind="gdn"):
    """Run ``schedule``; returns (md5 of every verify output, the live states per step); ``skip``: zero-copy steps
    left out on purpose (negative controls: "materialize", "accept", "rows")."""
    w = _World(drafts, ssm_dtype, zc, torch.Generator().manual_seed(seed), kind)
    md5, lives = hashlib.md5(), []
    # SGLang's batch-position table (build_verify_intermediate_state_indices): rows 0..size-1, then padding on row size
    default_rows = torch.cat([torch.arange(ROWS), torch.full((17,), ROWS)]).to(DEVICE, torch.int32)
    for ev in schedule:
        zcs = w.zc
        for kind, _rid, row, slot in ev.leaves:
            if zcs is not None and kind == "session":
                zcs.handoffs.append((row, torch.tensor(slot, device=DEVICE)))
        if ev.extends:
            if zcs is not None and zcs.handoffs:
                if "materialize" in skip:
                    zcs.handoffs.clear()
                else:
                    zcs.materialize(w.cache)
            for e in ev.extends:
                w.extend(e)
            if zcs is not None:
                slots = torch.tensor([e.slot for e in ev.extends], dtype=torch.int32, device=DEVICE)
                rows = torch.tensor([e.row for e in ev.extends], dtype=torch.int64, device=DEVICE)
                zcs.stage_in(w.cache, slots, rows)
        v = ev.verify
        if v is None:
            continue
        slots = torch.tensor([x[2] if x else -1 for x in v.entries], dtype=torch.int32, device=DEVICE)
        rpi = torch.tensor([x[1] if x else 0 for x in v.entries], dtype=torch.int64, device=DEVICE)
        y, out, rows = w.verify(v, rpi, slots, default_rows, stock_rows=zcs is not None and "rows" in skip)
        for n, x in enumerate(v.entries):
            if x is not None:
                md5.update(y[n].float().cpu().numpy().tobytes())
                md5.update(out[n].float().cpu().numpy().tobytes())
        steps = torch.tensor(
            [a - 1 if x else -1 for a, x in zip(v.accept, v.entries)], dtype=torch.int32, device=DEVICE
        )
        if zcs is not None and "accept" in skip:
            state_commit.launch(
                descriptor.get_plan(w.cache.conv, w.cache.intermediate_conv_window, None, None),
                accept=(steps, slots),
                src_rows=rpi,
            )
        else:
            w.commit(steps, slots, rows if zcs is None else None, rpi)
        lives.append({x[0]: (w.live(x[1], x[2]), w.conv[0, x[2]].clone()) for x in v.entries if x is not None})
    return md5.hexdigest(), lives


CASES = [
    ("gdn", 4, torch.float32),
    ("gdn", 2, torch.bfloat16),
    ("mamba2", 4, torch.float32),
    ("mamba2", 3, torch.bfloat16),
]


def _seed() -> int:
    """Fresh each run; a failure names it, ``ZERO_COPY_SIM_SEED=<seed>`` replays it."""
    return int(os.environ.get("ZERO_COPY_SIM_SEED") or random.SystemRandom().randrange(2**31))


def _schedule(drafts: int, ssm_dtype, session: bool = False):
    """A fresh random schedule with at least 8 verifies and 2 joins (and a session hand-off if ``session``): the
    first of up to 50 draws that has them. Returns the seed, the steps and the event counts."""
    shape = sim.Shape("gdn", HV, (VD, KD), DIM, CONV_K, drafts, ssm_dtype=ssm_dtype)
    for _ in range(50):
        seed = _seed()
        schedule, counts = sim.make_schedule(shape, seed, steps=24, rows=ROWS, slots=SLOTS, chunk=3)
        if counts["verify"] >= 8 and counts["join"] >= 2 and (counts["session"] or not session):
            return seed, schedule, counts
    pytest.fail(f"no schedule with what the test needs in 50 draws (last seed {seed}, events {dict(counts)})")


@pytest.mark.parametrize(
    "kind,drafts,ssm_dtype", CASES, ids=["gdn-D4-fp32", "gdn-D2-bf16", "mamba2-D4-fp32", "mamba2-D3-bf16"]
)
def test_zero_copy_through_sglang_kernels_is_bit_exact(zero_copy_patched, kind, drafts, ssm_dtype):
    seed, schedule, counts = _schedule(drafts, ssm_dtype)
    where = f"seed {seed} (replay with ZERO_COPY_SIM_SEED={seed}; events {dict(counts)})"
    stock_md5, stock_lives = replay(schedule, drafts, ssm_dtype, zc=False, seed=seed, kind=kind)
    zc_md5, zc_lives = replay(schedule, drafts, ssm_dtype, zc=True, seed=seed, kind=kind)
    for step, (a, b) in enumerate(zip(stock_lives, zc_lives)):
        assert a.keys() == b.keys()
        for rid in a:
            assert torch.equal(a[rid][0], b[rid][0]), f"{where}: step {step} request {rid}: SSM state differs"
            assert torch.equal(a[rid][1], b[rid][1]), f"{where}: step {step} request {rid}: conv window differs"
    assert stock_md5 == zc_md5, f"{where}: verify outputs differ"


CONTROLS = [
    ("gdn", "stage_in"),
    ("gdn", "accept"),
    ("gdn", "rows"),
    ("gdn", "materialize"),
    ("mamba2", "stage_in"),
    ("mamba2", "rows"),
]


@pytest.mark.parametrize("kind,skip", CONTROLS, ids=[f"{k}-{s}" for k, s in CONTROLS])
def test_each_zero_copy_step_is_needed(zero_copy_patched, kind, skip):
    """Negative controls: leaving out one step of the zero-copy scheme changes the outputs (``stage_in`` through the
    e2e's own fault, ``faults.ZC_NO_STAGE_IN``)."""
    seed, schedule, _ = _schedule(4, torch.float32, session=skip == "materialize")
    if skip == "stage_in":
        faults.install(faults.ZC_NO_STAGE_IN)
    stock_md5, _ = replay(schedule, 4, torch.float32, zc=False, seed=seed, kind=kind)
    zc_md5, _ = replay(schedule, 4, torch.float32, zc=True, seed=seed, skip=(skip,), kind=kind)
    assert stock_md5 != zc_md5, (
        f"seed {seed}: zero-copy without {skip} still matched stock (ZERO_COPY_SIM_SEED replays)"
    )
