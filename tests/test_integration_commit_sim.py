"""Speculative-decode simulation through real SGLang components, stock vs plugin (>= 32 steps).

Real pool (``HybridReqToTokenPool`` / ``MambaPool``), real verify writer (SGLang's Triton
``causal_conv1d_update`` writing the draft windows), real ``HybridLinearAttnBackend
.update_mamba_state_after_mtp_verify`` on a backend built by SGLang's own constructors; random drafts,
random accepted lengths (0, partial and full), track slots on some steps. Stock and plugin runs must give
bit-identical per-step outputs, window contents and final conv + SSM states. On CPU the Triton kernels run
under ``TRITON_INTERPRET=1``.
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("SGLANG_MAMBA_DEDUP_ALLOW_CPU", "1")  # tests only: the interpreter stands in for the GPU

import pytest
import torch

import integration_utils as iu

pytestmark = pytest.mark.release


@pytest.fixture(scope="module")
def kernel_impl():
    return iu.ensure_commit_kernel()


def _run(cfg, on: bool):
    with iu.cpu_stock_paths(cfg.device), iu.plugin(on):
        return iu.simulate(cfg)


def _compare(stock, ours, cfg):
    assert len(stock.step_md5s) == len(ours.step_md5s) == cfg.steps
    for i, (a, b) in enumerate(zip(stock.windows, ours.windows)):
        iu.assert_bitwise_equal(a, b, f"step {i} verify windows")
    if cfg.check_outputs:
        for i, (a, b) in enumerate(zip(stock.outputs, ours.outputs)):
            iu.assert_bitwise_equal(a, b, f"step {i} conv outputs")
    for i, (a, b) in enumerate(zip(stock.final, ours.final)):
        iu.assert_bitwise_equal(a, b, f"final state {i}")
    assert stock.step_md5s == ours.step_md5s


@pytest.mark.parametrize(
    "draft_tokens,conv_kernel,batch,conv_dtype",
    [(4, 4, 3, torch.float32), (3, 3, 2, torch.float32), (4, 4, 3, torch.bfloat16)],
    ids=["D4-K4-bs3-fp32", "D3-K3-bs2-fp32", "D4-K4-bs3-bf16"],
)
def test_speculative_decode_simulation_stock_vs_plugin(kernel_impl, draft_tokens, conv_kernel, batch, conv_dtype, capsys):
    cfg = iu.SimConfig(
        draft_tokens=draft_tokens, conv_kernel=conv_kernel, batch=batch, steps=32, conv_dtype=conv_dtype,
        check_outputs=conv_dtype != torch.bfloat16,
    )
    stock = _run(cfg, on=False)
    ours = _run(cfg, on=True)

    # The plugin really ran: its layout in the pool and every commit through our kernel.
    assert ours.layout == ("ours" if iu.BACKPORT else "upstream")
    assert ours.events["dedup_layout"]["physical_bytes"] * draft_tokens * (conv_kernel - 1) == (
        ours.events["dedup_layout"]["dense_bytes"] * (draft_tokens + conv_kernel - 2)
    )
    assert ours.events["commit_calls"] == ours.events["ours_commit_calls"] == cfg.steps
    assert stock.layout is None and stock.events["ours_commit_calls"] == 0

    # Partial acceptance, zero and full acceptance all occurred.
    lens = [n for step in ours.accept_lens for n in step]
    assert 0 in lens and draft_tokens in lens and any(0 < n < draft_tokens for n in lens)
    # The states moved (a commit that copies nothing would also be "equal").
    assert not torch.equal(ours.final[-1], torch.zeros_like(ours.final[-1]))

    _compare(stock, ours, cfg)
    with capsys.disabled():
        print(
            f"\n[commit-sim sglang {iu.SGLANG_VERSION} {kernel_impl} {cfg.device} D={draft_tokens} K={conv_kernel} "
            f"bs={batch} {str(conv_dtype).split('.')[-1]} steps={cfg.steps}] "
            f"stock: outputs {stock.outputs_md5 if cfg.check_outputs else 'not compared'} "
            f"windows {stock.windows_md5} final {stock.final_md5} | "
            f"plugin: outputs {ours.outputs_md5 if cfg.check_outputs else 'not compared'} "
            f"windows {ours.windows_md5} final {ours.final_md5}"
        )


# ------------------------------------------------------------------------------------------------------
# Branches SGLang keeps (chosen per call): the plugin must hand the call over unchanged.
def _small_backend():
    cp = iu.make_cache_params(num_layers=2, conv_dim=8, conv_kernel=4, num_heads=2, head_dim=4, state_size=4)
    pool = iu.build_pool(cache_params=cp, size=2, mamba_size=6, draft_tokens=4, topk=1)
    backend = iu.build_backend(pool, device="cpu", topk=1, draft_tokens=4)
    slots = torch.tensor([1, 2], dtype=torch.int32)
    iu.set_forward_metadata(backend, slots, 4)
    return pool, backend


def _recorder(calls, name):
    def rec(*args, **kwargs):
        calls.append(name)

    return rec


def test_our_path_commits_and_runs_ple(kernel_impl, monkeypatch):
    with iu.cpu_stock_paths(), iu.plugin(True):
        pool, backend = _small_backend()
        calls = []
        if not iu.BACKPORT:
            monkeypatch.setattr(backend, "_update_ple_state_after_mtp_verify", _recorder(calls, "ple"))
        backend.update_mamba_state_after_mtp_verify(torch.tensor([1, -1]), None, None, None)
        from sglang_mamba_dedup import report

        ev = report.events()
        assert ev["ours_commit_calls"] == 1 and ev["commit_calls"] == 1
        if not iu.BACKPORT:
            assert calls == ["ple"], "SGLang's PLE side-state commit must still run on our path"


@pytest.mark.skipif(iu.BACKPORT, reason="0.5.23 branches (not present in back-port releases)")
@pytest.mark.parametrize("branch", ["kda_fused_accept", "replayssm_kda", "pp_stable_rows", "replayssm_spec_no_ssm", "unified_pool"])
def test_branches_we_do_not_own_stay_on_sglang(kernel_impl, monkeypatch, branch):
    from sglang_mamba_dedup import report

    bk = iu.backend_module()
    with iu.cpu_stock_paths(), iu.plugin(True):
        pool, backend = _small_backend()
        calls = []
        args = (torch.tensor([1, 0]), None, None, None)
        kwargs = {}
        if branch == "kda_fused_accept":
            monkeypatch.setattr(bk, "fused_conv_window_scatter_with_mask", _recorder(calls, "sglang"))
            backend.linear_attn_backend.accept_lens_pool = torch.zeros(8, dtype=torch.int32)
        elif branch == "replayssm_kda":
            import importlib

            m = importlib.import_module("sglang.kernels.ops.attention.linear.kda_replayssm_spec_decode")
            monkeypatch.setattr(m, "commit_kda_replayssm_after_verify", _recorder(calls, "sglang"))
            pool.mamba_pool.replayssm_is_kda = True
        elif branch == "pp_stable_rows":
            monkeypatch.setattr(bk, "pp_spec_stable_rows_enabled", lambda: True)
            monkeypatch.setattr(bk, "scatter_mamba_states_after_mtp_verify", _recorder(calls, "sglang"))
            monkeypatch.setattr(backend, "_update_ple_state_after_mtp_verify", lambda *a, **k: None)
            kwargs["req_pool_indices"] = torch.tensor([0, 1])
        elif branch == "replayssm_spec_no_ssm":
            import dataclasses

            monkeypatch.setattr(bk, "scatter_mamba_states_after_mtp_verify", _recorder(calls, "sglang"))
            monkeypatch.setattr(backend, "_update_ple_state_after_mtp_verify", lambda *a, **k: None)
            mp = pool.mamba_pool
            mp.mamba_cache = dataclasses.replace(mp.mamba_cache, intermediate_ssm=None)
        elif branch == "unified_pool":
            monkeypatch.setattr(bk, "scatter_mamba_states_after_mtp_verify", _recorder(calls, "sglang"))
            monkeypatch.setattr(backend, "_update_ple_state_after_mtp_verify", lambda *a, **k: None)
            pool.mamba_pool._smd_commit_ok = False  # what the pool patch records for pools it did not build
        backend.update_mamba_state_after_mtp_verify(*args, **kwargs)
        ev = report.events()
        assert calls == ["sglang"], f"{branch}: SGLang's own code must run"
        assert ev["commit_calls"] == 1 and ev["ours_commit_calls"] == 0


def test_plugin_off_means_sglang_commit(kernel_impl):
    from sglang_mamba_dedup import report

    with iu.cpu_stock_paths(), iu.plugin(False):
        pool, backend = _small_backend()
        backend.update_mamba_state_after_mtp_verify(torch.tensor([1, 0]), None, None, None)
        assert report.events()["commit_calls"] == 0  # nothing of ours is wrapped
