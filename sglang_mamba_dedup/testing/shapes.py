"""The state shapes of the models we know: the one table the demo, the random model, the tests and the
benchmarks read (FACTS §6–7, the models' published configs).

Plain data, no torch or SGLang import; :mod:`.sglang_pool` builds SGLang's cache params and pools from it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """The Gated-DeltaNet state dimensions of a model (key and value heads share ``head_dim``)."""

    name: str
    layers: int  # decoder layers, full attention included
    gdn_layers: int  # of them Gated DeltaNet: the layers with conv + SSM state
    key_heads: int
    value_heads: int
    head_dim: int
    conv_kernel: int

    @property
    def conv_dim(self) -> int:
        return self.value_heads * self.head_dim + 2 * self.key_heads * self.head_dim

    @property
    def ssm_shape(self) -> tuple[int, int, int]:
        return (self.value_heads, self.head_dim, self.head_dim)

    def state_dims(self) -> dict[str, int]:
        """The state as the tests' ``make_cache_params`` / ``SimConfig`` keywords take it (SSM = heads x head_dim x state_size)."""
        return dict(
            num_layers=self.gdn_layers,
            conv_dim=self.conv_dim,
            conv_kernel=self.conv_kernel,
            num_heads=self.value_heads,
            head_dim=self.head_dim,
            state_size=self.head_dim,
        )


#: 24 layers, 18 of them Gated DeltaNet; 16 key + 16 value heads of 128; conv kernel 4 -> conv dim 6144, SSM 16x128x128.
QWEN35_08B = ModelShape(
    "Qwen3.5-0.8B", layers=24, gdn_layers=18, key_heads=16, value_heads=16, head_dim=128, conv_kernel=4
)
#: 48 layers, 36 GDN; 16 key + 32 value heads of 128; conv kernel 4 -> conv dim 8192, SSM 32x128x128.
QWEN3_NEXT_80B = ModelShape(
    "Qwen3-Next-80B-A3B", layers=48, gdn_layers=36, key_heads=16, value_heads=32, head_dim=128, conv_kernel=4
)

MODELS: dict[str, ModelShape] = {
    "qwen3.5-0.8b": QWEN35_08B,
    "qwen3-next-80b": QWEN3_NEXT_80B,
}
