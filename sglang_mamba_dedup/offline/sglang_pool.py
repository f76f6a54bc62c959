"""SGLang's own cache params and pools, built the way its ``ModelRunner`` builds them: the one builder the
demo, the tests and the benchmarks use (never the plugin's serving path).

* :func:`cache_params`: the installed release's ``Mamba2CacheParams`` for a model of :mod:`.shapes`;
* :func:`build_pool`: a real ``HybridReqToTokenPool`` (or a bare ``MambaPool``) over any cache params, given
  only the keyword arguments the installed release's constructor takes; where it takes no
  ``speculative_eagle_topk`` (0.5.12 ... 0.5.13.post1) the topk is published with
  :func:`.gate.speculative_topk`, as ``ModelRunner._init_pools`` does with the plugin on;
* :class:`CudaToDeviceTorch`: SGLang's hard-coded ``"cuda"`` scratch sent to another device, so its pool
  code can run on a CPU-only machine.

No torch or SGLang import at module load.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

from .shapes import ModelShape


def cache_params(shape: ModelShape, conv_dtype=None, ssm_dtype=None):
    """SGLang's ``Mamba2CacheParams`` for ``shape`` (one rank's state: a TP-sharded entry of the table already holds
    the per-rank heads and groups), built with the installed release's classes. ``ssm_dtype`` defaults to the
    shape's own (``ModelShape.ssm_dtype``: fp32, bf16 for the bf16-SSM entries)."""
    import torch
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateDType, Mamba2StateShape

    kwargs = dict(
        tp_world_size=1,
        intermediate_size=shape.value_heads * shape.head_dim,
        n_groups=shape.key_heads,
        num_heads=shape.value_heads,
        head_dim=shape.head_dim,
        state_size=shape.ssm_state_size,
        conv_kernel=shape.conv_kernel,
    )
    accepted = inspect.signature(Mamba2StateShape.create).parameters
    state_shape = Mamba2StateShape.create(**{k: v for k, v in kwargs.items() if k in accepted})
    dtype = Mamba2StateDType(conv=conv_dtype or torch.bfloat16, temporal=ssm_dtype or getattr(torch, shape.ssm_dtype))
    return Mamba2CacheParams(shape=state_shape, layers=list(range(shape.gdn_layers)), dtype=dtype)


def build_pool(
    cache_params,
    *,
    size: int,
    draft_tokens: int | None,
    topk: int | None = 1,
    device: str = "cpu",
    mamba_size: int | None = None,
    spec_state_size: int | None = None,
    max_context_len: int = 64,
    via_init_pools: bool = True,
    unified: bool = False,
    extra: dict[str, Any] | None = None,
):
    """SGLang's own pool over ``cache_params``, through its constructor (the plugin's patches, if applied, run).

    With ``mamba_size``: a ``HybridReqToTokenPool`` of ``size`` requests over ``mamba_size`` mamba slots (its
    ``.mamba_pool`` is the ``MambaPool``); without: a bare ``MambaPool`` of ``size`` slots. ``spec_state_size``
    (the speculative rows) defaults to ``size``. ``via_init_pools``: where the constructor takes no topk,
    publish ``topk`` (and ``unified``) to the gate as ``ModelRunner._init_pools`` does; off, the pool is built
    as outside ``_init_pools`` (topk unknown to the gate there).
    """
    from sglang.srt.mem_cache import memory_pool

    from .. import gate

    kwargs: dict[str, Any] = dict(
        size=size,
        cache_params=cache_params,
        mamba_layer_ids=list(cache_params.layers),
        device=device,
        enable_memory_saver=False,
        speculative_num_draft_tokens=draft_tokens,
        speculative_eagle_topk=topk,
    )
    if mamba_size is None:
        cls = memory_pool.MambaPool
        kwargs["spec_state_size"] = size if spec_state_size is None else spec_state_size
    else:
        cls = memory_pool.HybridReqToTokenPool
        kwargs.update(
            mamba_size=mamba_size,
            mamba_spec_state_size=size if spec_state_size is None else spec_state_size,
            max_context_len=max_context_len,
            enable_mamba_extra_buffer=False,
        )
    kwargs.update(extra or {})
    accepted = inspect.signature(cls.__init__).parameters
    publish = via_init_pools and "speculative_eagle_topk" not in accepted
    ctx = gate.speculative_topk(topk, unified=unified) if publish else contextlib.nullcontext()
    with ctx:
        return cls(**{k: v for k, v in kwargs.items() if k in accepted})


class CudaToDeviceTorch:
    """``torch`` as seen by SGLang's ``memory_pool`` module, with ``zeros(device="cuda")`` sent to ``device``.

    0.5.12 ... 0.5.19 allocate the speculative scratch on a hard-coded "cuda"; on a CPU-only machine the demo
    (and the tests) put this object in place of that module's ``torch`` so SGLang's own code can run."""

    def __init__(self, device):
        self._device = device

    def __getattr__(self, name):
        import torch

        return getattr(torch, name)

    def zeros(self, *args, **kwargs):
        import torch

        if kwargs.get("device") == "cuda":
            kwargs["device"] = self._device
        return torch.zeros(*args, **kwargs)
