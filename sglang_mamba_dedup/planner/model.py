"""The planner's model: where the launch flags say it is, and the state shape its ``config.json`` gives (the text
part of a multimodal one), checked before any SGLang work; one tensor-parallel rank of it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..offline.shapes import ModelShape
from ..sizing import GIB


class PlanError(ValueError):
    """A bad model or option: one line, exit 2."""


#: The largest value a config field may hold before the planner calls it nonsense (no model has more).
FIELD_LIMIT = 1 << 20


def _count(cfg: dict[str, Any], key: str, *, low: int = 1) -> int:
    """A whole number of the config between ``low`` and :data:`FIELD_LIMIT` (a usage error otherwise)."""
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= FIELD_LIMIT:
        raise PlanError(f"config.json: {key} = {value!r} is not a whole number from {low} to {FIELD_LIMIT}")
    return value


def _gdn_shape(name: str, cfg: dict[str, Any]) -> ModelShape:
    need = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_conv_kernel_dim")
    missing = [k for k in need + ("num_hidden_layers",) if k not in cfg]
    if missing:
        raise PlanError(f"config of {name} lacks {', '.join(missing)}")
    if cfg.get("linear_value_head_dim", cfg["linear_key_head_dim"]) != cfg["linear_key_head_dim"]:
        raise PlanError("linear_key_head_dim != linear_value_head_dim is not a shape the plugin knows")
    layers = _count(cfg, "num_hidden_layers")
    if isinstance(cfg.get("layer_types"), list):
        if len(cfg["layer_types"]) != layers:
            raise PlanError(
                f"config.json: layer_types lists {len(cfg['layer_types'])} layers, num_hidden_layers says {layers}"
            )
        linear = sum(1 for t in cfg["layer_types"] if t == "linear_attention")
    elif cfg.get("full_attention_interval") is not None:
        linear = layers - layers // _count(cfg, "full_attention_interval")
    else:
        raise PlanError(f"config of {name} says neither layer_types nor full_attention_interval")
    return ModelShape(
        name,
        layers=layers,
        gdn_layers=linear,
        key_heads=_count(cfg, "linear_num_key_heads"),
        value_heads=_count(cfg, "linear_num_value_heads"),
        head_dim=_count(cfg, "linear_key_head_dim"),
        conv_kernel=_count(cfg, "linear_conv_kernel_dim", low=2),
        ssm_dtype=_ssm_dtype(cfg),
    )


def _ssm_dtype(cfg: dict[str, Any]) -> str:
    value = str(cfg.get("mamba_ssm_dtype") or "float32")
    if value not in ("float32", "bfloat16", "float16"):
        raise PlanError(f"config.json: mamba_ssm_dtype = {value!r} is not float32, bfloat16 or float16")
    return value


def _mamba2_shape(name: str, cfg: dict[str, Any]) -> ModelShape:
    pattern = cfg.get("hybrid_override_pattern") or ""
    if not isinstance(pattern, str) or len(pattern) > FIELD_LIMIT:
        raise PlanError(f"config.json: hybrid_override_pattern = {pattern!r:.40} is not a layer pattern")
    need = ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "conv_kernel")
    missing = [k for k in need if k not in cfg] + ([] if pattern else ["hybrid_override_pattern"])
    if missing:
        raise PlanError(f"config of {name} lacks {', '.join(missing)}")
    group_key = "mamba_n_groups" if "mamba_n_groups" in cfg else "n_groups"
    if group_key not in cfg:
        raise PlanError(f"config of {name} lacks n_groups")
    return ModelShape(
        name,
        layers=len(pattern),
        gdn_layers=pattern.count("M"),
        key_heads=_count(cfg, group_key),
        value_heads=_count(cfg, "mamba_num_heads"),
        head_dim=_count(cfg, "mamba_head_dim"),
        conv_kernel=_count(cfg, "conv_kernel", low=2),
        state_size=_count(cfg, "ssm_state_size"),
        mixer="mamba2",
        ssm_dtype=_ssm_dtype(cfg),
    )


#: model_type of config.json -> how its state shape is read (and where the text part lives).
MODEL_TYPES = {
    "qwen3_next": _gdn_shape,
    "qwen3_5": _gdn_shape,
    "qwen3_5_text": _gdn_shape,
    "qwen3_5_moe": _gdn_shape,
    "qwen3_5_moe_text": _gdn_shape,
    "nemotron_h": _mamba2_shape,
}


def shape_from_config(path: Path) -> tuple[ModelShape, float | None]:
    """``(shape, weights_gb)`` of a model directory: its ``config.json`` (the text part of a multimodal one),
    and the size of its ``*.safetensors`` files when present (None otherwise)."""
    cfg_file = path / "config.json"
    if path.is_file():  # m4: the config file itself, not its folder
        raise PlanError(f"{path} is a file: --model-path names the checkpoint's folder (the one holding config.json)")
    if not cfg_file.is_file():
        raise PlanError(f"{path} has no config.json (the planner reads the checkpoint's config; no download)")
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise PlanError(f"{cfg_file}: not readable JSON ({type(exc).__name__})") from None
    if not isinstance(cfg, dict):
        raise PlanError(f"{cfg_file}: not a JSON object")
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None
    model_type = (text or cfg).get("model_type") or cfg.get("model_type")
    reader = MODEL_TYPES.get(str(model_type))
    if reader is None:
        raise PlanError(
            f"model_type {model_type!r} is not a hybrid model the plugin knows (known: {', '.join(MODEL_TYPES)})"
        )
    shape = reader(path.name, {**cfg, **(text or {})})
    try:
        weights = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    except OSError as exc:  # a dangling link
        raise PlanError(f"{path}: a safetensors file cannot be read ({exc})") from None
    return shape, (weights / GIB if weights else None)


def shard(shape: ModelShape, tp: int) -> ModelShape:
    """One tensor-parallel rank's state: heads and groups divided by ``tp``."""
    if tp == 1:
        return shape
    if shape.tp != 1:
        raise PlanError(f"--shape {shape.name} is already one rank of TP {shape.tp}; pass its unsharded model")
    if shape.value_heads % tp or shape.key_heads % tp:
        raise PlanError(
            f"--tp-size {tp} does not divide {shape.name}'s heads ({shape.value_heads}) and groups ({shape.key_heads})"
        )
    return dataclasses.replace(
        shape,
        name=f"{shape.name} TP{tp} (one rank)",
        key_heads=shape.key_heads // tp,
        value_heads=shape.value_heads // tp,
        tp=tp,
    )


def flag_value(argv: list[str], *flags: str) -> str | None:
    """The value of the last of ``flags`` in a command line (``--flag VALUE`` or ``--flag=VALUE``), or None: the
    last one given is the one argparse keeps (m-P7)."""
    found = None
    for i, a in enumerate(argv):
        for flag in flags:
            if a == flag and i + 1 < len(argv):
                found = argv[i + 1]
            elif a.startswith(flag + "="):
                found = a.split("=", 1)[1]
    return found


def model_flag(argv: list[str]) -> str | None:
    """The model directory ``launch_server``'s flags name (``--model-path`` or its alias ``--model``, the last)."""
    return flag_value(argv, "--model-path", "--model")
