"""The random-weight Nemotron-H (Mamba2) checkpoint: SGLang's own config and model classes take it (CPU)."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_mamba_dedup.e2e import random_model as rm
from sglang_mamba_dedup.offline import shapes

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

ROOT = Path(__file__).resolve().parents[2]
TINY = rm.PRESETS["nemotron-h-tiny"]


@pytest.fixture(scope="module")
def tiny_bf16(tmp_path_factory):
    """The tiny preset with a bf16 SSM state (the config's mamba_ssm_dtype)."""
    return rm.build_random_model(
        tmp_path_factory.mktemp("nemotron"), preset="nemotron-h-tiny", overrides={"ssm_dtype": "bfloat16"}
    )


def test_config_and_names(tiny_bf16):
    cfg = json.loads((tiny_bf16 / "config.json").read_text())
    assert cfg["architectures"] == ["NemotronHForCausalLM"] and cfg["model_type"] == "nemotron_h"
    assert cfg["num_nextn_predict_layers"] == 1 and cfg["mtp_hybrid_override_pattern"] == "*"
    assert cfg["n_groups"] == cfg["mamba_n_groups"] and cfg["conv_kernel"] == cfg["mamba_d_conv"]
    assert cfg["mamba_ssm_dtype"] == "bfloat16"
    names = set(safetensors_torch.load_file(str(tiny_bf16 / "model.safetensors")))
    assert {
        "backbone.embeddings.weight",
        "backbone.layers.0.mixer.A_log",
        "backbone.layers.0.mixer.conv1d.weight",
        "backbone.layers.2.mixer.q_proj.weight",
        "mtp.layers.0.eh_proj.weight",
        "mtp.layers.0.final_layernorm.weight",
        "lm_head.weight",
    } <= names
    assert TINY.mamba_head_dim != TINY.ssm_state_size  # the Mamba2 case the GDN presets never had


def test_transformers_reads_config_and_names(tiny_bf16):
    """transformers' own NemotronH config and model (meta device) have exactly our target's names and shapes
    (its module is ``model.``; the published checkpoints, and SGLang's loader, spell it ``backbone.``)."""
    from transformers import AutoConfig, NemotronHForCausalLM

    cfg = AutoConfig.from_pretrained(str(tiny_bf16))
    assert type(cfg).__name__ == "NemotronHConfig" and cfg.n_groups == TINY.mamba_n_groups
    with torch.device("meta"):
        model = NemotronHForCausalLM(cfg)
    theirs = {n: tuple(p.shape) for n, p in model.named_parameters()}
    ours = {
        n.replace("backbone.", "model.", 1): tuple(s)
        for n, s, _, _ in rm.weight_specs(TINY)
        if not n.startswith("mtp.")
    }
    assert ours == theirs


def test_sglang_builds_both_models_and_loads_every_weight(tiny_bf16):
    """SGLang's ModelConfig picks NemotronHForCausalLM and, as the NEXTN draft, NemotronHForCausalLMMTP; both are
    built on the CPU and every parameter is reached by a checkpoint tensor, with no name left unmatched."""
    pytest.importorskip("sglang")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.sglang_model_load", str(tiny_bf16)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=280,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    res = json.loads(lines[-1][len("RESULT ") :])
    target, draft = res["target"], res["draft"]
    assert target["architecture"] == "NemotronHForCausalLM"
    assert draft["architecture"] == "NemotronHForCausalLMMTP"
    for role in (target, draft):
        assert role["not_loaded"] == [] and role["warnings"] == [], role
    assert any(n.startswith("model.layers.0.eh_proj") for n in draft["parameters"])
    # SGLang's cache params of this checkpoint: Mamba2 state [heads, head_dim, state], bf16 from the config
    assert target["cache"] == {
        "conv": [[TINY.conv_dim, TINY.conv_kernel - 1]],
        "temporal": [TINY.mamba_num_heads, TINY.mamba_head_dim, TINY.ssm_state_size],
        "layers": [i for i, c in enumerate(TINY.pattern) if c == "M"],
        "ssm_dtype": "torch.bfloat16",
    }


def test_mini_preset_has_nemotron_h_8b_state():
    d = rm.PRESETS["nemotron-h-mini"]
    s = shapes.NEMOTRON_H_8B  # the one shape table
    assert (d.mamba_num_heads, d.mamba_head_dim, d.ssm_state_size, d.mamba_n_groups, d.conv_kernel) == (
        s.value_heads,
        s.head_dim,
        s.ssm_state_size,
        s.key_heads,
        s.conv_kernel,
    )
    assert d.conv_dim == s.conv_dim == 10240
    assert d.mamba_layers >= 2 and "*" in d.pattern and "-" in d.pattern
    n = sum(int(torch.Size(sh).numel()) for _, sh, _, _ in rm.weight_specs(d))
    assert n < 250e6  # builds in seconds
    assert rm.PRESETS["nemotron-h-mini-bf16"] == dataclasses.replace(d, ssm_dtype="bfloat16")


def test_shape_table_matches_sglang_nemotron_h_defaults():
    """NemotronHConfig's defaults are the published 8B's ("similar to NemotronH-v0.1"): our table agrees."""
    pytest.importorskip("sglang")
    from sglang.srt.configs.nemotron_h import NemotronHConfig

    c = NemotronHConfig()
    s = shapes.NEMOTRON_H_8B
    assert (c.mamba_num_heads, c.mamba_head_dim, c.ssm_state_size, c.mamba_n_groups, c.conv_kernel) == (
        s.value_heads,
        s.head_dim,
        s.ssm_state_size,
        s.key_heads,
        s.conv_kernel,
    )
    assert (len(c.hybrid_override_pattern), c.hybrid_override_pattern.count("M")) == (s.layers, s.gdn_layers)
    assert shapes.NEMOTRON_H_8B_TP2.conv_dim * 2 == s.conv_dim
    assert shapes.NEMOTRON_H_8B_BF16.ssm_dtype == "bfloat16"


def test_seeded_and_eh_proj_passes_the_embedding(tiny_bf16, tmp_path):
    again = rm.build_random_model(tmp_path / "a", preset="nemotron-h-tiny", overrides={"ssm_dtype": "bfloat16"})
    a = safetensors_torch.load_file(str(tiny_bf16 / "model.safetensors"))
    b = safetensors_torch.load_file(str(again / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    H = TINY.hidden_size
    assert torch.equal(a["mtp.layers.0.eh_proj.weight"][:, :H].float(), torch.eye(H))
