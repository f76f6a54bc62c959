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

import hashlib
import os
import random

import pytest
import torch

from sglang_mamba_dedup import versions
from sglang_mamba_dedup.kernels import descriptor, state_commit
from sglang_mamba_dedup.patches import faults
from tests.support import integration as iu
from tests.support import zero_copy_sim as sim
from tests.support.zero_copy_world import CONV_K, DEVICE, DIM, HV, KD, ROWS, SLOTS, VD, World

pytestmark = [
    *iu.release_only(versions.ZERO_COPY, f"the zero-copy commit is built for SGLang {versions.ZERO_COPY_RELEASE} only"),
]


def replay(schedule, drafts: int, ssm_dtype, zc: bool, seed: int, skip=(), kind="gdn"):
    """Run ``schedule``; returns (md5 of every verify output, the live states per step); ``skip``: zero-copy steps
    left out on purpose (negative controls: "materialize", "accept", "rows")."""
    w = World(drafts, ssm_dtype, zc, torch.Generator().manual_seed(seed), kind)
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
