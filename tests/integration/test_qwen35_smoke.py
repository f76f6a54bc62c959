"""Qwen3.5-0.8B smoke test: the stock-vs-plugin speculative-decode simulation with Qwen3.5-0.8B's GDN
state shapes (18 GDN layers, conv dim 6144, conv kernel 4, SSM 16x128x128, 4 draft tokens, batch 2).

On CPU the Triton kernels run under the interpreter, so it is a few steps (fp32 conv: the interpreter
mis-computes SGLang's bf16 conv *outputs*); the >= 32-step run is in test_commit_sim.py and
the bf16 CUDA run in tools/gpu-engine/proofs/integration_gpu.py.

Where it runs: on the newest release and the newest back-port release (where the layout is the plugin's own), not
on every release (100 s each under the interpreter, 40 % of a release job). What differs by release (the pool's
layout, the commit's route, SGLang's verify kernels) is the same code at any shape, and
``test_commit_sim.py`` runs it on every release; what these shapes add (conv dim 6144, 18 layers) is the plugin's
own kernel and byte rules, the same code on every release. ``SMD_EVERY_RELEASE=1`` runs it anyway.
"""

from __future__ import annotations

import os

import pytest

from sglang_mamba_dedup import versions
from tests.support import integration as iu

NEWEST_BACKPORT = [r for r in versions.RELEASES if r in versions.BACKPORT][-1]

pytestmark = [
    pytest.mark.release,
    pytest.mark.usefixtures("allow_cpu"),
    pytest.mark.skipif(
        not (iu.SGLANG_VERSION in (versions.RELEASES[-1], NEWEST_BACKPORT) or os.environ.get("SMD_EVERY_RELEASE")),
        reason="the 0.8B shapes run on the newest and the newest back-port release; test_commit_sim covers this one",
    ),
]

STEPS = int(os.environ.get("SMD_QWEN35_SMOKE_STEPS", "2"))


def test_qwen35_08b_shapes_smoke(capsys):
    kernel = iu.ensure_commit_kernel()
    cfg = iu.SimConfig(**iu.QWEN35_08B, draft_tokens=4, batch=2, steps=STEPS, seed=35)
    with iu.cpu_stock_paths(cfg.device), iu.plugin(False):
        stock = iu.simulate(cfg)
    with iu.cpu_stock_paths(cfg.device), iu.plugin(True):
        ours = iu.simulate(cfg)
    assert ours.layout == ("ours" if iu.BACKPORT else "upstream")
    assert ours.events["ours_commit_calls"] == STEPS
    lens = [n for step in ours.accept_lens for n in step]
    assert 0 in lens and 4 in lens and any(0 < n < 4 for n in lens)  # zero, full and partial acceptance
    ev = ours.events["dedup_layout"]
    assert ev["physical_bytes"] * 2 == ev["dense_bytes"]  # (D+K-2)/(D*(K-1)) = 6/12 at D=4, K=4
    for i, (a, b) in enumerate(zip(stock.outputs, ours.outputs)):
        iu.assert_bitwise_equal(a, b, f"step {i} outputs")
    for i, (a, b) in enumerate(zip(stock.windows, ours.windows)):
        iu.assert_bitwise_equal(a, b, f"step {i} windows")
    for i, (a, b) in enumerate(zip(stock.final, ours.final)):
        iu.assert_bitwise_equal(a, b, f"final state {i}")
    with capsys.disabled():
        print(
            f"\n[qwen3.5-0.8B smoke sglang {iu.SGLANG_VERSION} {kernel} steps={STEPS} bs=2 D=4] "
            f"window scratch {ev['dense_bytes']} B dense -> {ev['physical_bytes']} B; "
            f"stock final {stock.final_md5} outputs {stock.outputs_md5} | plugin final {ours.final_md5} outputs {ours.outputs_md5}"
        )
