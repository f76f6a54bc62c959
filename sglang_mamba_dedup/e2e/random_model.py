"""Build a checkpoint with seeded random weights and its MTP layer: Qwen3.5 (Gated DeltaNet) or Nemotron-H (Mamba2).

No model can be downloaded on our machines, yet the e2e check needs a hybrid model with an MTP head that SGLang
serves with NEXTN. :func:`build_random_model` writes ``config.json`` (the published architecture and parameter
names; Qwen3.5's layer and GDN dimensions from :data:`sglang_mamba_dedup.offline.shapes.QWEN35_08B`),
``model.safetensors``, ``generation_config.json`` and ``random_model.json`` (preset, seed, knobs); no tokenizer
(serve it with ``skip_tokenizer_init`` and token-id prompts). Every tensor comes from its own CPU generator,
seeded from ``seed`` and its name. Why the weights are shaped as they are (an untied head, the ``mix`` knobs, the
MTP pass-through) and the config details SGLang relies on: docs/e2e.md, "The random-weight checkpoint".

CLI: ``python -m sglang_mamba_dedup.e2e.random_model OUT_DIR [--preset NAME] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..offline.shapes import NEMOTRON_H_8B, QWEN35_08B

__all__ = ["ModelDims", "NemotronHDims", "PRESETS", "build_config", "weight_specs", "build_random_model", "main"]


@dataclasses.dataclass(frozen=True)
class ModelDims:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int = 4
    full_attention_interval: int = 4
    mtp_num_hidden_layers: int = 1
    max_position_embeddings: int = 262144
    rope_theta: float = 10_000_000.0
    partial_rotary_factor: float = 0.25
    rms_norm_eps: float = 1e-6

    @property
    def layer_types(self) -> list[str]:
        return [
            "full_attention" if (i + 1) % self.full_attention_interval == 0 else "linear_attention"
            for i in range(self.num_hidden_layers)
        ]

    @property
    def conv_dim(self) -> int:
        return (
            2 * self.linear_num_key_heads * self.linear_key_head_dim
            + self.linear_num_value_heads * self.linear_value_head_dim
        )


@dataclasses.dataclass(frozen=True)
class NemotronHDims:
    """A Nemotron-H (Mamba2 hybrid) checkpoint: ``pattern`` is the published ``hybrid_override_pattern``
    (``M`` Mamba2, ``*`` attention, ``-`` MLP), ``mtp_pattern`` the MTP step's (``*`` only here)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int  # the MLP layers' size
    pattern: str
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int  # attention head size
    mamba_num_heads: int
    mamba_head_dim: int
    ssm_state_size: int
    mamba_n_groups: int
    conv_kernel: int = 4
    mtp_pattern: str = "*"
    ssm_dtype: str | None = None  # None: SGLang's default (fp32); "bfloat16": mamba_ssm_dtype in the config
    chunk_size: int = 128
    max_position_embeddings: int = 8192
    layer_norm_epsilon: float = 1e-5

    @property
    def num_hidden_layers(self) -> int:
        return len(self.pattern)

    @property
    def mamba_layers(self) -> int:
        return self.pattern.count("M")

    @property
    def mamba_intermediate(self) -> int:
        return self.mamba_num_heads * self.mamba_head_dim

    @property
    def conv_dim(self) -> int:
        return self.mamba_intermediate + 2 * self.mamba_n_groups * self.ssm_state_size


#: Nemotron-H-8B's Mamba2 state per layer (the shape table: 128 heads of 64, state 128, 8 groups, conv kernel 4,
#: conv dim 10240, SSM 128x64x128) in a model small enough to build in seconds: hidden 1024, 4 Mamba2 + 1 attention +
#: 3 MLP layers, vocab 32768 (the 8B: hidden 4096, 52 layers, vocab 131072). Attention as in the 8B: 32 query / 8 KV
#: heads of 128, here 8 / 2.
_NEMOTRON_MINI = NemotronHDims(
    vocab_size=32768,
    hidden_size=1024,
    intermediate_size=4096,
    pattern="M-M*M-M-",
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=128,
    mamba_num_heads=NEMOTRON_H_8B.value_heads,
    mamba_head_dim=NEMOTRON_H_8B.head_dim,
    ssm_state_size=NEMOTRON_H_8B.ssm_state_size,
    mamba_n_groups=NEMOTRON_H_8B.key_heads,
    conv_kernel=NEMOTRON_H_8B.conv_kernel,
)

PRESETS: dict[str, ModelDims | NemotronHDims] = {
    # Qwen/Qwen3.5-0.8B text part (published config); the layer count and the GDN state dimensions come from the
    # shape table (sglang_mamba_dedup.offline.shapes), the rest is the full model's.
    "qwen3.5-0.8b": ModelDims(
        vocab_size=248320,
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=QWEN35_08B.layers,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=256,
        linear_num_key_heads=QWEN35_08B.key_heads,
        linear_num_value_heads=QWEN35_08B.value_heads,
        linear_key_head_dim=QWEN35_08B.head_dim,
        linear_value_head_dim=QWEN35_08B.head_dim,
        linear_conv_kernel_dim=QWEN35_08B.conv_kernel,
    ),
    # For CPU tests: 3 GDN layers + 1 full attention layer + MTP, a few MB in bf16.
    "tiny": ModelDims(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        max_position_embeddings=4096,
    ),
    "nemotron-h-mini": _NEMOTRON_MINI,
    # the same with a bf16 SSM state (mamba_ssm_dtype: bfloat16)
    "nemotron-h-mini-bf16": dataclasses.replace(_NEMOTRON_MINI, ssm_dtype="bfloat16"),
    # For CPU tests: 2 Mamba2 layers (SSM 4 heads x 8 x 16: head_dim != state), 1 attention, 2 MLP, MTP; a few MB.
    "nemotron-h-tiny": NemotronHDims(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        pattern="M-*M-",
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        mamba_num_heads=4,
        mamba_head_dim=8,
        ssm_state_size=16,
        mamba_n_groups=2,
        chunk_size=16,
        max_position_embeddings=4096,
    ),
}

#: Knobs of the random weights, calibrated on the 0.8B preset (docs/e2e.md, "The random-weight checkpoint").
DEFAULT_KNOBS = {
    "mix": 0.03,
    "mtp_mix": 0.05,
    "mtp_hidden_mix": 0.03,
    "conv_std": 0.5,
}


def build_config(dims: ModelDims | NemotronHDims, dtype: str = "bfloat16") -> dict:
    """The ``config.json`` of a text-only Qwen3.5 checkpoint (or a Nemotron-H one) with ``dims``."""
    if isinstance(dims, NemotronHDims):
        return _nemotron_config(dims, dtype)
    rope = {
        "rope_type": "default",
        "rope_theta": dims.rope_theta,
        "partial_rotary_factor": dims.partial_rotary_factor,
        "mrope_section": [11, 11, 10],
        "mrope_interleaved": True,
    }
    text = {
        "model_type": "qwen3_5_text",
        "vocab_size": dims.vocab_size,
        "hidden_size": dims.hidden_size,
        "intermediate_size": dims.intermediate_size,
        "num_hidden_layers": dims.num_hidden_layers,
        "num_attention_heads": dims.num_attention_heads,
        "num_key_value_heads": dims.num_key_value_heads,
        "head_dim": dims.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": dims.max_position_embeddings,
        "rms_norm_eps": dims.rms_norm_eps,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "linear_conv_kernel_dim": dims.linear_conv_kernel_dim,
        "linear_key_head_dim": dims.linear_key_head_dim,
        "linear_value_head_dim": dims.linear_value_head_dim,
        "linear_num_key_heads": dims.linear_num_key_heads,
        "linear_num_value_heads": dims.linear_num_value_heads,
        "full_attention_interval": dims.full_attention_interval,
        "layer_types": dims.layer_types,
        "mtp_num_hidden_layers": dims.mtp_num_hidden_layers,
        "mtp_use_dedicated_embeddings": False,
        "partial_rotary_factor": dims.partial_rotary_factor,
        "rope_parameters": rope,
        "tie_word_embeddings": False,
        "use_cache": True,
        "dtype": dtype,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }
    vision = {  # never built (language_model_only); small so that nothing large is implied
        "model_type": "qwen3_5",
        "depth": 1,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": dims.hidden_size,
        "num_position_embeddings": 64,
        "deepstack_visual_indexes": [],
    }
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "language_model_only": True,
        "text_config": text,
        "vision_config": vision,
        "tie_word_embeddings": False,
        "dtype": dtype,
        "image_token_id": dims.vocab_size - 4,
        "video_token_id": dims.vocab_size - 3,
        "vision_start_token_id": dims.vocab_size - 2,
        "vision_end_token_id": dims.vocab_size - 1,
    }


def _nemotron_config(dims: NemotronHDims, dtype: str) -> dict:
    cfg = {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "vocab_size": dims.vocab_size,
        "hidden_size": dims.hidden_size,
        "intermediate_size": dims.intermediate_size,
        "num_hidden_layers": dims.num_hidden_layers,
        "hybrid_override_pattern": dims.pattern,
        "num_attention_heads": dims.num_attention_heads,
        "num_key_value_heads": dims.num_key_value_heads,
        "head_dim": dims.head_dim,
        "attention_head_dim": dims.head_dim,
        "mlp_hidden_act": "relu2",
        "attention_bias": False,
        "mlp_bias": False,
        "use_bias": False,
        "layer_norm_epsilon": dims.layer_norm_epsilon,
        "residual_in_fp32": False,
        "max_position_embeddings": dims.max_position_embeddings,
        "mamba_num_heads": dims.mamba_num_heads,
        "mamba_head_dim": dims.mamba_head_dim,
        "ssm_state_size": dims.ssm_state_size,
        "n_groups": dims.mamba_n_groups,  # read by SGLang's mamba2_cache_params and by transformers
        "mamba_n_groups": dims.mamba_n_groups,  # read by SGLang's MambaMixer2
        "conv_kernel": dims.conv_kernel,
        "mamba_d_conv": dims.conv_kernel,
        "expand": 2,
        "mamba_hidden_act": "silu",
        "use_conv_bias": True,
        "mamba_conv_bias": True,
        "mamba_proj_bias": False,
        "chunk_size": dims.chunk_size,
        "num_nextn_predict_layers": 1,
        "mtp_hybrid_override_pattern": dims.mtp_pattern,
        "tie_word_embeddings": False,
        "use_cache": True,
        "dtype": dtype,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }
    if dims.ssm_dtype is not None:
        cfg["mamba_ssm_dtype"] = dims.ssm_dtype  # SGLang's name (configs/mamba_utils.mamba2_state_dtype)
        cfg["mamba_ssm_cache_dtype"] = dims.ssm_dtype  # transformers' name
    return cfg


# (name, shape, init kind, fan_in); kinds: embed, head, in, out, mtp_out, conv, a_log, dt_bias,
# zeros (Gemma-style (1 + w) norms), ones (plain norms), mtp_fc.
Spec = tuple[str, tuple[int, ...], str, int]


def _decoder_layer_specs(prefix: str, dims: ModelDims, kind: str, out_kind: str) -> list[Spec]:
    H, I = dims.hidden_size, dims.intermediate_size
    specs: list[Spec] = []
    if kind == "linear_attention":
        kd = dims.linear_num_key_heads * dims.linear_key_head_dim
        vd = dims.linear_num_value_heads * dims.linear_value_head_dim
        nv = dims.linear_num_value_heads
        la = prefix + "linear_attn."
        specs += [
            (la + "dt_bias", (nv,), "dt_bias", 0),
            (la + "A_log", (nv,), "a_log", 0),
            (la + "conv1d.weight", (dims.conv_dim, 1, dims.linear_conv_kernel_dim), "conv", 0),
            (la + "norm.weight", (dims.linear_value_head_dim,), "ones", 0),
            (la + "out_proj.weight", (H, vd), out_kind, vd),
            (la + "in_proj_qkv.weight", (2 * kd + vd, H), "in", H),
            (la + "in_proj_z.weight", (vd, H), "in", H),
            (la + "in_proj_b.weight", (nv, H), "in", H),
            (la + "in_proj_a.weight", (nv, H), "in", H),
        ]
    else:
        qd = dims.num_attention_heads * dims.head_dim
        kvd = dims.num_key_value_heads * dims.head_dim
        sa = prefix + "self_attn."
        specs += [
            (sa + "q_proj.weight", (2 * qd, H), "in", H),  # query and output gate
            (sa + "k_proj.weight", (kvd, H), "in", H),
            (sa + "v_proj.weight", (kvd, H), "in", H),
            (sa + "o_proj.weight", (H, qd), out_kind, qd),
            (sa + "q_norm.weight", (dims.head_dim,), "zeros", 0),
            (sa + "k_norm.weight", (dims.head_dim,), "zeros", 0),
        ]
    specs += [
        (prefix + "mlp.gate_proj.weight", (I, H), "in", H),
        (prefix + "mlp.up_proj.weight", (I, H), "in", H),
        (prefix + "mlp.down_proj.weight", (H, I), out_kind, I),
        (prefix + "input_layernorm.weight", (H,), "zeros", 0),
        (prefix + "post_attention_layernorm.weight", (H,), "zeros", 0),
    ]
    return specs


def _nemotron_block_specs(prefix: str, dims: NemotronHDims, kind: str, out_kind: str) -> list[Spec]:
    H = dims.hidden_size
    mx = prefix + "mixer."
    if kind == "M":
        nh, mi = dims.mamba_num_heads, dims.mamba_intermediate
        return [
            (mx + "in_proj.weight", (2 * mi + 2 * dims.mamba_n_groups * dims.ssm_state_size + nh, H), "in", H),
            (mx + "conv1d.weight", (dims.conv_dim, 1, dims.conv_kernel), "conv", 0),
            (mx + "conv1d.bias", (dims.conv_dim,), "zeros", 0),
            (mx + "dt_bias", (nh,), "dt_bias", 0),
            (mx + "A_log", (nh,), "a_log", 0),
            (mx + "D", (nh,), "ones", 0),
            (mx + "norm.weight", (mi,), "ones", 0),
            (mx + "out_proj.weight", (H, mi), out_kind, mi),
        ]
    if kind == "*":
        qd = dims.num_attention_heads * dims.head_dim
        kvd = dims.num_key_value_heads * dims.head_dim
        return [
            (mx + "q_proj.weight", (qd, H), "in", H),
            (mx + "k_proj.weight", (kvd, H), "in", H),
            (mx + "v_proj.weight", (kvd, H), "in", H),
            (mx + "o_proj.weight", (H, qd), out_kind, qd),
        ]
    if kind == "-":
        ffn = dims.intermediate_size
        return [
            (mx + "up_proj.weight", (ffn, H), "in", H),
            (mx + "down_proj.weight", (H, ffn), out_kind, ffn),
        ]
    raise ValueError(f"layer kind {kind!r} is not built here (M, *, - only)")


def _nemotron_specs(dims: NemotronHDims) -> list[Spec]:
    H = dims.hidden_size
    specs: list[Spec] = [("backbone.embeddings.weight", (dims.vocab_size, H), "embed", 0)]
    for i, kind in enumerate(dims.pattern):
        p = f"backbone.layers.{i}."
        specs.append((p + "norm.weight", (H,), "ones", 0))
        specs += _nemotron_block_specs(p, dims, kind, "out")
    specs.append(("backbone.norm_f.weight", (H,), "ones", 0))
    specs.append(("lm_head.weight", (dims.vocab_size, H), "head", H))
    last = len(dims.mtp_pattern) - 1
    for j, kind in enumerate(dims.mtp_pattern):
        p = f"mtp.layers.{j}."
        if j == 0:  # the step's start projections
            specs += [
                (p + "enorm.weight", (H,), "ones", 0),
                (p + "hnorm.weight", (H,), "ones", 0),
                (p + "eh_proj.weight", (H, 2 * H), "mtp_fc", 2 * H),
            ]
        specs.append((p + "norm.weight", (H,), "ones", 0))
        specs += _nemotron_block_specs(p, dims, kind, "mtp_out")
        if j == last:
            specs.append((p + "final_layernorm.weight", (H,), "ones", 0))
    return specs


def weight_specs(dims: ModelDims | NemotronHDims) -> list[Spec]:
    """Every tensor of the checkpoint, in file order, with its published name."""
    if isinstance(dims, NemotronHDims):
        return _nemotron_specs(dims)
    H = dims.hidden_size
    lm = "model.language_model."
    specs: list[Spec] = [(lm + "embed_tokens.weight", (dims.vocab_size, H), "embed", 0)]
    for i, kind in enumerate(dims.layer_types):
        specs += _decoder_layer_specs(f"{lm}layers.{i}.", dims, kind, "out")
    specs.append((lm + "norm.weight", (H,), "zeros", 0))
    specs.append(("lm_head.weight", (dims.vocab_size, H), "head", H))
    specs += [
        ("mtp.fc.weight", (H, 2 * H), "mtp_fc", 2 * H),
        ("mtp.pre_fc_norm_embedding.weight", (H,), "zeros", 0),
        ("mtp.pre_fc_norm_hidden.weight", (H,), "zeros", 0),
    ]
    for j in range(dims.mtp_num_hidden_layers):
        specs += _decoder_layer_specs(f"mtp.layers.{j}.", dims, "full_attention", "mtp_out")
    specs.append(("mtp.norm.weight", (H,), "zeros", 0))
    return specs


def _generator(seed: int, name: str):
    import torch

    g = torch.Generator(device="cpu")
    g.manual_seed((int(seed) * 1_000_003 + zlib.crc32(name.encode())) % (2**63 - 1))
    return g


def _init_tensor(name: str, shape, kind: str, fan_in: int, seed: int, knobs: dict):
    import torch

    g = _generator(seed, name)
    if kind == "zeros":
        return torch.zeros(shape)
    if kind == "ones":
        return torch.ones(shape)
    if kind == "dt_bias":
        return torch.ones(shape)
    if kind == "a_log":
        return torch.log(torch.empty(shape).uniform_(1.0, 16.0, generator=g))
    if kind == "embed":
        return torch.randn(shape, generator=g)
    if kind == "conv":
        return torch.randn(shape, generator=g) * knobs["conv_std"]
    std = 1.0 / math.sqrt(max(fan_in, 1))
    if kind in ("in", "head"):
        return torch.randn(shape, generator=g) * std
    if kind == "out":
        return torch.randn(shape, generator=g) * (knobs["mix"] * std)
    if kind == "mtp_out":
        return torch.randn(shape, generator=g) * (knobs["mtp_mix"] * std)
    if kind == "mtp_fc":
        H = shape[0]
        w = torch.zeros(shape)
        w[:, :H] = torch.eye(H)  # embedding half: pass through
        w[:, H:] = torch.randn((H, H), generator=g) * (knobs["mtp_hidden_mix"] / math.sqrt(H))
        return w
    raise ValueError(f"unknown init kind {kind!r} for {name}")


def iter_random_weights(
    dims: ModelDims | NemotronHDims, seed: int = 0, dtype: str = "bfloat16", knobs: dict | None = None
) -> Iterator[tuple[str, object]]:
    """Yield ``(name, tensor)`` for every tensor of :func:`weight_specs` (CPU, in ``dtype``)."""
    import torch

    k = dict(DEFAULT_KNOBS)
    k.update(knobs or {})
    tdtype = getattr(torch, dtype)
    for name, shape, kind, fan_in in weight_specs(dims):
        t = _init_tensor(name, shape, kind, fan_in, seed, k)
        if kind in ("a_log", "dt_bias"):
            yield name, t.to(torch.float32).contiguous()  # SGLang keeps these in fp32
        else:
            yield name, t.to(tdtype).contiguous()


def resolve_dims(preset: str = "qwen3.5-0.8b", overrides: dict | None = None) -> ModelDims | NemotronHDims:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    dims = PRESETS[preset]
    if overrides:
        dims = dataclasses.replace(dims, **overrides)
    return dims


def build_random_model(
    out_dir,
    preset: str = "qwen3.5-0.8b",
    seed: int = 0,
    dtype: str = "bfloat16",
    knobs: dict | None = None,
    overrides: dict | None = None,
) -> Path:
    """Write config + seeded random safetensors of ``preset`` into ``out_dir``; return the path.

    ``overrides`` replaces single :class:`ModelDims` fields (e.g. ``{"num_hidden_layers": 8}``);
    ``knobs`` replaces entries of :data:`DEFAULT_KNOBS`.
    """
    try:
        from safetensors.torch import save_file
    except ImportError as exc:
        raise RuntimeError(
            "writing a random-weight checkpoint needs safetensors: pip install 'sglang-mamba-dedup[e2e]'"
        ) from exc

    dims = resolve_dims(preset, overrides)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    k = dict(DEFAULT_KNOBS)
    k.update(knobs or {})
    tensors: dict[str, Any] = dict(iter_random_weights(dims, seed=seed, dtype=dtype, knobs=k))
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(build_config(dims, dtype), indent=2) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps({"do_sample": False, "_from_model_config": True}, indent=2) + "\n"
    )
    info = {
        "builder": "sglang_mamba_dedup.e2e.random_model",
        "preset": preset,
        "seed": seed,
        "dtype": dtype,
        "knobs": k,
        "dims": dataclasses.asdict(dims),
        "num_parameters": int(sum(t.numel() for t in tensors.values())),
        "tokenizer": None,
    }
    (out / "random_model.json").write_text(json.dumps(info, indent=2) + "\n")
    return out


def _parse_kv(items: list[str], caster) -> dict:
    res = {}
    for it in items or []:
        key, _, val = it.partition("=")
        if not _:
            raise SystemExit(f"expected KEY=VALUE, got {it!r}")
        res[key] = caster(val)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m sglang_mamba_dedup.e2e.random_model",
        description="Write a Qwen3.5- or Nemotron-H-architecture checkpoint (with MTP) with seeded random weights.",
    )
    p.add_argument("out_dir")
    p.add_argument("--preset", default="qwen3.5-0.8b", choices=sorted(PRESETS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="FIELD=INT",
        help="override one ModelDims field, e.g. --dim num_hidden_layers=8",
    )
    p.add_argument(
        "--knob",
        action="append",
        default=[],
        metavar="NAME=FLOAT",
        help=f"override a weight knob ({', '.join(DEFAULT_KNOBS)})",
    )
    a = p.parse_args(argv)
    out = build_random_model(
        a.out_dir,
        preset=a.preset,
        seed=a.seed,
        dtype=a.dtype,
        knobs=_parse_kv(a.knob, float),
        overrides=_parse_kv(a.dim, int),
    )
    info = json.loads((out / "random_model.json").read_text())
    print(f"wrote {out} ({info['num_parameters']:,} parameters, preset {a.preset}, seed {a.seed})")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
