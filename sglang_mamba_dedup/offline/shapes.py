"""The state shapes of the models we know: the one table the demo, the random model, the tests and the
benchmarks read (FACTS §6–7, the models' published configs).

Two mixer families share SGLang's ``Mamba2CacheParams`` and so this one record:

* Gated DeltaNet (Qwen3.5, Qwen3-Next): ``key_heads`` are the key heads, ``value_heads`` the value heads, and
  the SSM state is ``value_heads x head_dim x head_dim`` (``state_size`` left at its default, ``head_dim``);
* Mamba2 (Nemotron-H, also Falcon-H1 and the Granite-4 hybrids): ``key_heads`` are the B/C groups
  (``mamba_n_groups``), ``value_heads`` the SSM heads (``mamba_num_heads``), ``head_dim`` the head size
  (``mamba_head_dim``) and ``state_size`` the state size (``ssm_state_size``), so the SSM state is
  ``heads x head_dim x state_size`` with ``head_dim != state_size`` and the conv dim is
  ``heads*head_dim + 2*groups*state_size``. ``ssm_dtype`` is the SSM state's default dtype.

A TP-sharded entry holds one rank's state (heads and groups divided by ``tp``), as SGLang's
``Mamba2StateShape.create(tp_world_size=tp)`` does when the groups divide evenly.

Plain data, no torch or SGLang import; :mod:`.sglang_pool` builds SGLang's cache params and pools from it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """The conv + SSM state dimensions of a model (the module docstring says what each field means per family)."""

    name: str
    layers: int  # decoder layers, full attention included
    gdn_layers: int  # of them the layers with conv + SSM state (Gated DeltaNet or Mamba2)
    key_heads: int
    value_heads: int
    head_dim: int
    conv_kernel: int
    state_size: int | None = None  # Mamba2's ssm_state_size; None: head_dim (Gated DeltaNet)
    mixer: str = "gdn"  # "gdn" or "mamba2"
    ssm_dtype: str = "float32"  # the SSM state's default dtype (a torch dtype name)
    tp: int = 1  # the tensor-parallel size one rank's state below is for

    @property
    def ssm_state_size(self) -> int:
        return self.head_dim if self.state_size is None else self.state_size

    @property
    def conv_dim(self) -> int:
        return self.value_heads * self.head_dim + 2 * self.key_heads * self.ssm_state_size

    @property
    def ssm_shape(self) -> tuple[int, int, int]:
        return (self.value_heads, self.head_dim, self.ssm_state_size)

    def state_dims(self) -> dict[str, int]:
        """The state as the tests' ``make_cache_params`` / ``SimConfig`` keywords take it (SSM = heads x head_dim x state_size)."""
        return dict(
            num_layers=self.gdn_layers,
            conv_dim=self.conv_dim,
            conv_kernel=self.conv_kernel,
            num_heads=self.value_heads,
            head_dim=self.head_dim,
            state_size=self.ssm_state_size,
        )


#: 24 layers, 18 of them Gated DeltaNet; 16 key + 16 value heads of 128; conv kernel 4 -> conv dim 6144, SSM 16x128x128.
QWEN35_08B = ModelShape(
    "Qwen3.5-0.8B", layers=24, gdn_layers=18, key_heads=16, value_heads=16, head_dim=128, conv_kernel=4
)
#: 48 layers, 36 GDN; 16 key + 32 value heads of 128; conv kernel 4 -> conv dim 8192, SSM 32x128x128.
QWEN3_NEXT_80B = ModelShape(
    "Qwen3-Next-80B-A3B", layers=48, gdn_layers=36, key_heads=16, value_heads=32, head_dim=128, conv_kernel=4
)

#: Nemotron-H-8B (Mamba2), the published config (NemotronHConfig's defaults, "similar to NemotronH-v0.1", as in
#: SGLang's and vLLM's ``configs/nemotron_h.py``; 52 layers, hidden 4096 per NVIDIA's model card and Megatron-Bridge's
#: docs): pattern ``M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-`` = 24 Mamba2 + 4 attention + 24 MLP
#: layers; 128 Mamba heads of 64, state 128, 8 groups, conv kernel 4 -> conv dim 10240, SSM 128x64x128.
NEMOTRON_H_8B = ModelShape(
    "Nemotron-H-8B",
    layers=52,
    gdn_layers=24,
    key_heads=8,
    value_heads=128,
    head_dim=64,
    conv_kernel=4,
    state_size=128,
    mixer="mamba2",
)
#: One rank of Nemotron-H-8B at TP 2: 64 heads, 4 groups -> conv dim 5120, SSM 64x64x128.
NEMOTRON_H_8B_TP2 = dataclasses.replace(
    NEMOTRON_H_8B, name="Nemotron-H-8B TP2 (one rank)", key_heads=4, value_heads=64, tp=2
)
#: Nemotron-H-8B with a bf16 SSM state (``mamba_ssm_dtype: bfloat16`` in the config, or
#: ``SGLANG_MAMBA_SSM_DTYPE=bfloat16``): half the SSM bytes, same shapes.
NEMOTRON_H_8B_BF16 = dataclasses.replace(NEMOTRON_H_8B, name="Nemotron-H-8B (bf16 SSM)", ssm_dtype="bfloat16")

MODELS: dict[str, ModelShape] = {
    "qwen3.5-0.8b": QWEN35_08B,
    "qwen3-next-80b": QWEN3_NEXT_80B,
    "nemotron-h-8b": NEMOTRON_H_8B,
    "nemotron-h-8b-tp2": NEMOTRON_H_8B_TP2,
    "nemotron-h-8b-bf16": NEMOTRON_H_8B_BF16,
}
