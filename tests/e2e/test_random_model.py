"""The random-weight Qwen3.5 checkpoint builder (tiny preset; CPU)."""

import json

import pytest

from sglang_mamba_dedup.e2e import random_model as rm
from sglang_mamba_dedup.offline import shapes

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return rm.build_random_model(tmp_path_factory.mktemp("tiny"), preset="tiny", seed=0)


def test_writes_config_weights_and_provenance(tiny):
    cfg = json.loads((tiny / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert cfg["language_model_only"] is True and cfg["tie_word_embeddings"] is False
    text = cfg["text_config"]
    assert text["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert text["mtp_num_hidden_layers"] == 1
    info = json.loads((tiny / "random_model.json").read_text())
    assert info["preset"] == "tiny" and info["seed"] == 0 and info["tokenizer"] is None
    names = set(safetensors_torch.load_file(str(tiny / "model.safetensors")))
    assert {
        "mtp.fc.weight",
        "mtp.pre_fc_norm_embedding.weight",
        "mtp.pre_fc_norm_hidden.weight",
        "mtp.layers.0.self_attn.q_proj.weight",
        "mtp.norm.weight",
        "lm_head.weight",
        "model.language_model.layers.0.linear_attn.conv1d.weight",
    } <= names
    assert not (tiny / "tokenizer.json").exists()  # tokenizer-free: served with skip_tokenizer_init


def test_seeded_and_machine_independent(tmp_path, tiny):
    again = rm.build_random_model(tmp_path / "again", preset="tiny", seed=0)
    other = rm.build_random_model(tmp_path / "other", preset="tiny", seed=1)
    a = safetensors_torch.load_file(str(tiny / "model.safetensors"))
    b = safetensors_torch.load_file(str(again / "model.safetensors"))
    c = safetensors_torch.load_file(str(other / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["lm_head.weight"], c["lm_head.weight"])
    # the MTP fc passes the embedding half through (draft ~ target's token map)
    H = rm.PRESETS["tiny"].hidden_size
    assert torch.equal(a["mtp.fc.weight"][:, :H].float(), torch.eye(H))


def test_names_and_shapes_match_transformers(tiny):
    """Parameter names/shapes are exactly those of transformers' Qwen3.5 text model (+ the MTP layer)."""
    transformers = pytest.importorskip("transformers")
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    cfg = json.loads((tiny / "config.json").read_text())["text_config"]
    cfg.pop("model_type")
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**cfg))
    ours = {
        n.replace("model.language_model.", "model."): tuple(s)
        for n, s, _, _ in rm.weight_specs(rm.PRESETS["tiny"])
        if not n.startswith("mtp.")
    }
    theirs = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert ours == theirs
    # the MTP layer is a full-attention decoder layer with the same parameter set
    mtp = {n[len("mtp.layers.0.") :] for n, *_ in rm.weight_specs(rm.PRESETS["tiny"]) if n.startswith("mtp.layers.0.")}
    att = {n[len("model.layers.3.") :] for n in theirs if n.startswith("model.layers.3.")}
    assert mtp == att
    assert transformers  # noqa


def test_transformers_reads_it_back(tiny):
    from transformers import AutoConfig, Qwen3_5ForCausalLM

    cfg = AutoConfig.from_pretrained(str(tiny))
    assert cfg.model_type == "qwen3_5" and cfg.text_config.num_hidden_layers == 4
    model, info = Qwen3_5ForCausalLM.from_pretrained(str(tiny), output_loading_info=True, dtype=torch.float32)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    files = safetensors_torch.load_file(str(tiny / "model.safetensors"))
    assert torch.equal(model.lm_head.weight.to(torch.bfloat16), files["lm_head.weight"])
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[1, 5, 9, 200, 17]])).logits
    assert out.shape == (1, 5, 1024) and torch.isfinite(out).all()


@pytest.mark.release
def test_sglang_config_accepts_it(tiny):
    """SGLang's own ModelConfig reads it as a hybrid GDN model and picks the MTP draft class."""
    pytest.importorskip("sglang")
    from sglang.srt.configs.model_config import ModelConfig

    target = ModelConfig(str(tiny))
    assert type(target.hf_config).__name__ == "Qwen3_5Config"
    assert target.hf_text_config.linear_layer_ids == [0, 1, 2]
    assert target.hf_text_config.full_attention_layer_ids == [3]
    draft = ModelConfig(str(tiny), is_draft_model=True)
    assert draft.hf_config.architectures == ["Qwen3_5ForCausalLMMTP"]


def test_default_preset_is_qwen35_08b():
    d = rm.PRESETS["qwen3.5-0.8b"]
    assert (d.num_hidden_layers, d.hidden_size, d.intermediate_size, d.vocab_size) == (24, 1024, 3584, 248320)
    assert d.layer_types.count("linear_attention") == 18 and d.layer_types.count("full_attention") == 6
    assert (d.linear_num_key_heads, d.linear_num_value_heads, d.linear_key_head_dim) == (16, 16, 128)
    assert d.conv_dim == 6144 and d.linear_conv_kernel_dim == 4
    q = shapes.QWEN35_08B  # the package's one shape table: the preset's GDN state is what the pools are built with
    assert (d.layer_types.count("linear_attention"), d.conv_dim, d.linear_conv_kernel_dim) == (
        q.gdn_layers,
        q.conv_dim,
        q.conv_kernel,
    )
    assert (d.num_attention_heads, d.num_key_value_heads, d.head_dim) == (8, 2, 256)
    n = sum(int(torch.Size(s).numel()) for _, s, _, _ in rm.weight_specs(d))
    assert 0.8e9 < n < 1.2e9  # ~0.75B backbone + untied head + MTP layer


def test_cli(tmp_path, capsys):
    assert rm.main([str(tmp_path / "m"), "--preset", "tiny", "--dim", "num_hidden_layers=8", "--knob", "mix=0.1"]) == 0
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["text_config"]["num_hidden_layers"] == 8
    assert json.loads((tmp_path / "m" / "random_model.json").read_text())["knobs"]["mix"] == 0.1
    assert "parameters" in capsys.readouterr().out
