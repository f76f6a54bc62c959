"""State shapes of the models we know, and SGLang cache params built from them.

The numbers are the models' published configs (FACTS §6–7); ``cache_params`` builds the real
SGLang ``Mamba2CacheParams`` of the installed release, so pools built from it are SGLang's own.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Dict


@dataclass(frozen=True)
class ModelShape:
    name: str
    gdn_layers: int
    key_heads: int
    value_heads: int
    head_dim: int
    conv_kernel: int

    @property
    def conv_dim(self) -> int:
        return self.value_heads * self.head_dim + 2 * self.key_heads * self.head_dim

    @property
    def ssm_shape(self):
        return (self.value_heads, self.head_dim, self.head_dim)


MODELS: Dict[str, ModelShape] = {
    # 24 layers, 18 of them Gated DeltaNet; 16 key + 16 value heads of 128; conv kernel 4 -> conv dim 6144.
    "qwen3.5-0.8b": ModelShape("Qwen3.5-0.8B", 18, 16, 16, 128, 4),
    # 48 layers, 36 GDN; 16 key + 32 value heads of 128 -> conv dim 8192, SSM 32x128x128.
    "qwen3-next-80b": ModelShape("Qwen3-Next-80B-A3B", 36, 16, 32, 128, 4),
}


def cache_params(shape: ModelShape, conv_dtype=None, ssm_dtype=None):
    """SGLang's ``Mamba2CacheParams`` for ``shape`` (TP 1), built with the installed release's classes."""
    import torch
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateDType, Mamba2StateShape

    kwargs = dict(
        tp_world_size=1,
        intermediate_size=shape.value_heads * shape.head_dim,
        n_groups=shape.key_heads,
        num_heads=shape.value_heads,
        head_dim=shape.head_dim,
        state_size=shape.head_dim,
        conv_kernel=shape.conv_kernel,
    )
    accepted = inspect.signature(Mamba2StateShape.create).parameters
    state_shape = Mamba2StateShape.create(**{k: v for k, v in kwargs.items() if k in accepted})
    dtype = Mamba2StateDType(conv=conv_dtype or torch.bfloat16, temporal=ssm_dtype or torch.float32)
    return Mamba2CacheParams(shape=state_shape, layers=list(range(shape.gdn_layers)), dtype=dtype)
