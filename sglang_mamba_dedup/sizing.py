"""The mamba pool's bytes: the deduplicated conv-window layout, and the bytes per request by buffer.

**The layout.** Consecutive draft steps' ``(dim, K-1)`` conv windows overlap by ``K-2`` columns, so instead of the
dense ``[L, S+1, D, dim, K-1]`` scratch one buffer ``phys [L, S+1, dim, D+K-2]`` is seen through an overlapping
view ``view[l, s, t, d, w] is phys[l, s, d, t + w]``: ``(D+K-2) / (D*(K-1))`` of the bytes (0.5 at D=4, K=4),
correct only for a linear draft chain (:mod:`sglang_mamba_dedup.gate`).

**Bytes per request**, for the estimator patch, the gate and the planner (the ledger measures the pool; the tests
compare the two), duck-typed on SGLang's ``Mamba2CacheParams``. No SGLang import; torch only for tensors.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

GIB = 1 << 30
MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class RequestBytes:
    """Bytes of one request across all mamba layers of a rank: ``conv_state`` + ``ssm_state`` is one mamba slot; one
    verify row has the per-draft SSM snapshots (0 under ReplaySSM), the ``D`` windows (dense, and as allocated:
    deduplicated or dense) and the ReplaySSM ring row where the release says its size."""

    conv_state: int
    ssm_state: int
    ssm_scratch: int
    conv_scratch_dense: int
    conv_scratch_physical: int
    ring: int = 0

    @property
    def state(self) -> int:
        return self.conv_state + self.ssm_state

    @property
    def scratch(self) -> int:
        """One verify row as allocated: SSM snapshots, the physical conv windows, the ring."""
        return self.ssm_scratch + self.conv_scratch_physical + self.ring


def _numel(shape: Any) -> int:
    return math.prod(int(x) for x in shape)


def conv_bytes(cache_params: Any) -> int:
    """One slot's conv state (every conv kind, every layer)."""
    return (
        sum(_numel(cs) for cs in cache_params.shape.conv) * cache_params.dtype.conv.itemsize * len(cache_params.layers)
    )


def ssm_bytes(cache_params: Any) -> int:
    """One slot's SSM (temporal) state, every layer."""
    return _numel(cache_params.shape.temporal) * cache_params.dtype.temporal.itemsize * len(cache_params.layers)


def conv_window_physical_bytes(cache_params: Any, draft_tokens: int) -> int:
    """One verify row of the deduplicated window: per conv kind ``[dim, D+K-2]`` (the window is the last axis)."""
    per_layer = 0
    for cs in cache_params.shape.conv:
        *lead, win = (int(x) for x in cs)
        per_layer += math.prod(lead) * (int(draft_tokens) + win - 1)
    return per_layer * cache_params.dtype.conv.itemsize * len(cache_params.layers)


def request_bytes(
    cache_params: Any, draft_tokens: int | None, *, dedup: bool, replayssm: bool = False, ring: int = 0
) -> RequestBytes:
    """Per-request bytes by buffer. ``draft_tokens`` None (no speculative decoding): no scratch."""
    conv, ssm = conv_bytes(cache_params), ssm_bytes(cache_params)
    if not draft_tokens:
        return RequestBytes(conv, ssm, 0, 0, 0, 0)
    d = int(draft_tokens)
    dense = conv * d
    return RequestBytes(
        conv_state=conv,
        ssm_state=ssm,
        ssm_scratch=0 if replayssm else ssm * d,
        conv_scratch_dense=dense,
        conv_scratch_physical=conv_window_physical_bytes(cache_params, d) if dedup else dense,
        ring=int(ring) if replayssm else 0,
    )


def ring_bytes(cache_params: Any, record_len: int | None) -> int | None:
    """The ReplaySSM ring row as the release prices it (``replayssm_ring_bytes_per_req``), or None."""
    fn = getattr(cache_params, "replayssm_ring_bytes_per_req", None)
    if fn is None or record_len is None:
        return None
    return int(fn(record_len=record_len))


# -- the deduplicated conv-window layout


def ratio(num_draft_tokens: int, conv_kernel: int) -> float:
    """Physical / dense bytes of the window scratch: ``(D+K-2) / (D*(K-1))``."""
    d, k = int(num_draft_tokens), int(conv_kernel)
    return (d + k - 2) / (d * (k - 1))


def view_of(phys: Any, num_draft_tokens: int, window: int) -> Any:
    """The overlapping ``[L, S, D, dim, K-1]`` view of a contiguous ``[L, S, dim, D+K-2]`` buffer."""
    if phys.dim() != 4 or not phys.is_contiguous():
        raise ValueError(f"phys must be a contiguous 4-d tensor, got shape {tuple(phys.shape)} strides {phys.stride()}")
    if phys.shape[3] != num_draft_tokens + window - 1:
        raise ValueError(f"phys last dim {phys.shape[3]} != D+K-2 = {num_draft_tokens + window - 1}")
    s0, s1, s2, s3 = phys.stride()
    return phys.as_strided(
        (phys.shape[0], phys.shape[1], int(num_draft_tokens), phys.shape[2], int(window)),
        (s0, s1, s3, s2, s3),
        phys.storage_offset(),
    )


def allocate(
    *, num_layers: int, rows: int, num_draft_tokens: int, conv_shape: Sequence[int], dtype: Any, device: Any
) -> tuple[Any, Any]:
    """Allocate one zeroed physical buffer and return ``(phys, view)``; allocates nothing else."""
    import torch

    dim, win = int(conv_shape[0]), int(conv_shape[1])
    shape = (int(num_layers), int(rows), dim, int(num_draft_tokens) + win - 1)
    phys = torch.zeros(shape, dtype=dtype, device=device)
    return phys, view_of(phys, num_draft_tokens, win)


def nbytes(t: Any) -> int:
    """Logical bytes of a tensor (or list of tensors), as SGLang's ``get_tensor_size_bytes`` counts."""
    if t is None:
        return 0
    if isinstance(t, (list, tuple)):
        return sum(nbytes(x) for x in t)
    return int(t.numel()) * int(t.element_size())


def dedup_problem(view: Any, phys: Any) -> str | None:
    """None when ``view`` is exactly the overlapping view of ``phys``, else what differs: with these shapes and
    strides and the same first address, ``view[l,s,t,d,w]`` is ``phys[l,s,d,t+w]`` for every element."""
    if view is None or phys is None:
        return "no tensor"
    if phys.dim() != 4 or view.dim() != 5:
        return f"ranks phys {phys.dim()} / view {view.dim()} (want 4 / 5)"
    L, S, D, dim, win = view.shape
    if tuple(phys.shape) != (L, S, dim, D + win - 1):
        return f"phys shape {tuple(phys.shape)} != {(L, S, dim, D + win - 1)}"
    if view.dtype != phys.dtype or view.device != phys.device:
        return "dtype/device differ"
    if not phys.is_contiguous():
        return "phys is not contiguous"
    if view.untyped_storage().data_ptr() != phys.untyped_storage().data_ptr():
        return "view does not share phys's storage"
    s0, s1, s2, s3 = phys.stride()
    if tuple(view.stride()) != (s0, s1, s3, s2, s3):
        return f"view strides {tuple(view.stride())} != {(s0, s1, s3, s2, s3)}"
    if view.data_ptr() != phys.data_ptr():
        return "view starts elsewhere in the storage"
    return None
