"""The offline route's pieces that need no GPU: the fault variable of a run, the CUDA check."""

from sglang_mamba_dedup.e2e import engine


def test_fault_mode_sets_the_fault_only_in_fault_runs():
    env = engine.fault_env({"SGLANG_MAMBA_DEDUP_FAULT": "stale"}, "on")
    assert "SGLANG_MAMBA_DEDUP_FAULT" not in env
    assert engine.fault_env({}, "fault") == {"SGLANG_MAMBA_DEDUP_FAULT": "commit_step0"}


def test_cuda_check_is_about_the_engine_device(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "CUDA GPU" in engine.cuda_problem({})
    assert "CUDA GPU" in engine.cuda_problem({"device": "cuda"})
    assert engine.cuda_problem({"device": "cpu"}) is None  # the user picked another device: not our call
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert engine.cuda_problem({}) is None
