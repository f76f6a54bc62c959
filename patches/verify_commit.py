"""The post-verify commit of accepted SSM states and conv windows.

Wraps ``sglang.srt.layers.attention.hybrid_linear_attn_backend.HybridLinearAttnBackend
.update_mamba_state_after_mtp_verify`` (0.5.12 ... 0.5.23); ``HybridAttnBackend`` delegates to it.
Undone by ``sglang_mamba_dedup.revert()``.
"""
from __future__ import annotations


def update_mamba_state_after_mtp_verify(wrapped, instance, args, kwargs):
    # Pass-through until the integration lands (issue 4).
    return wrapped(*args, **kwargs)
