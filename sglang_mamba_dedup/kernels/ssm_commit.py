"""Single-kind SSM (temporal) state commit, through the fused commit kernel.

For each index set ``(steps, slots)`` and each valid row ``r``
(``s = steps[r]``, ``slot = slots[r]``, see ``_common``), for every layer ``l``::

    ssm_dst[l, slot] = ssm_src[l, r, s]        # one [*ssm_shape] entry

``ssm_dst`` is ``[L, slots+1, *ssm_shape]`` and ``ssm_src`` ``[L, R, D, *ssm_shape]``;
the layer/slot/row/step strides are free, the ``*ssm_shape`` dims must be dense.

It is :func:`.fused_commit` with no conv pair: one launch, grid
``(entry tiles, L, rows)``, accept rows first, then track rows.
"""

from __future__ import annotations

from ._common import _INT32_MAX, check_same_device, check_state_tensor, entry_is_dense
from .fused_commit import get_plan, launch_plan


def ssm_commit(*, ssm_dst, ssm_src, accept_steps, accept_slots, track_steps=None, track_slots=None) -> None:
    """Commit the accepted (and tracked) SSM state of every request, all layers, one launch.

    Index semantics, plan caching and CUDA-graph capture as :func:`fused_commit`.
    """
    check_state_tensor("ssm_dst", ssm_dst, 2)
    check_state_tensor("ssm_src", ssm_src, 3)
    check_same_device(ssm_dst.device, ssm_src=ssm_src)
    if ssm_src.ndim != ssm_dst.ndim + 1:
        raise ValueError(
            f"ssm_commit: ssm_src must have one more dim than ssm_dst: {tuple(ssm_src.shape)} vs {tuple(ssm_dst.shape)}"
        )
    if ssm_dst.dtype != ssm_src.dtype:
        raise TypeError(f"ssm_commit: ssm_dst is {ssm_dst.dtype} but ssm_src is {ssm_src.dtype}")
    if ssm_src.shape[0] != ssm_dst.shape[0] or tuple(ssm_src.shape[3:]) != tuple(ssm_dst.shape[2:]):
        raise ValueError(
            f"ssm_commit: shape mismatch: ssm_dst {tuple(ssm_dst.shape)} vs ssm_src {tuple(ssm_src.shape)}"
        )
    if not entry_is_dense(ssm_dst, 2) or not entry_is_dense(ssm_src, 3):
        raise ValueError(
            f"ssm_commit: the state dims must be dense in ssm_dst {tuple(ssm_dst.stride())} and ssm_src {tuple(ssm_src.stride())}"
        )
    numel = 1
    for n in ssm_dst.shape[2:]:
        numel *= n
    if numel > _INT32_MAX:
        raise ValueError("ssm_commit: one state entry has more than 2**31-1 elements")
    plan = get_plan([], [], ssm_dst, ssm_src, "ssm_commit")
    launch_plan(plan, ssm_src, ssm_dst, accept_steps, accept_slots, track_steps, track_slots, "ssm_commit")
