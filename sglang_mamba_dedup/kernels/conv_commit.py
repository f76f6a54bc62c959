"""Single-kind conv-window commit, through the fused commit kernel.

For each index set ``(steps, slots)`` and each valid row ``r``
(``s = steps[r]``, ``slot = slots[r]``, see ``_common``), for every layer ``l``::

    conv_dst[l, slot, d, w] = conv_src[l, r, s, d, w]     d < dim, w < K-1

``conv_src`` is ``[L, R, D, dim, K-1]`` with any strides: the deduplicated
overlapping view (``view[l, r, t, d, w] == phys[l, r, d, t + w]``, over
``phys [L, R, dim, D+K-2]``) or a dense buffer.  ``conv_dst`` is
``[L, slots+1, dim, K-1]`` with any strides.

It is :func:`.fused_commit` with one conv pair and no SSM pair: one launch, grid
``(window tiles, L, rows)``, accept rows first, then track rows.
"""

from __future__ import annotations

from ._common import _INT32_MAX, check_same_device, check_state_tensor
from .fused_commit import get_plan, launch_plan


def conv_commit(*, conv_dst, conv_src, accept_steps, accept_slots, track_steps=None, track_slots=None) -> None:
    """Commit the accepted (and tracked) conv window of every request, all layers, one launch.

    conv_dst: ``[L, slots+1, dim, K-1]``; conv_src: ``[L, R, D, dim, K-1]``; any strides.
    Index semantics, plan caching and CUDA-graph capture as :func:`fused_commit`.
    """
    check_state_tensor("conv_dst", conv_dst, 4)
    check_state_tensor("conv_src", conv_src, 5)
    check_same_device(conv_dst.device, conv_src=conv_src)
    if conv_dst.ndim != 4 or conv_src.ndim != 5:
        raise ValueError(
            f"conv_commit: conv_dst must be 4-D and conv_src 5-D, got {tuple(conv_dst.shape)} and {tuple(conv_src.shape)}"
        )
    if conv_dst.dtype != conv_src.dtype:
        raise TypeError(f"conv_commit: conv_dst is {conv_dst.dtype} but conv_src is {conv_src.dtype}")
    L, _, dim, km1 = conv_dst.shape
    if conv_src.shape[0] != L or tuple(conv_src.shape[3:]) != (dim, km1):
        raise ValueError(
            f"conv_commit: shape mismatch: conv_dst {tuple(conv_dst.shape)} vs conv_src {tuple(conv_src.shape)}"
        )
    if dim * km1 > _INT32_MAX:
        raise ValueError("conv_commit: one window has more than 2**31-1 elements")
    plan = get_plan([conv_dst], [conv_src], None, None, "conv_commit")
    launch_plan(plan, None, None, accept_steps, accept_slots, track_steps, track_slots, "conv_commit")
