"""One kind of state per call: shape adapters over the commit kernel's plan and launch (:mod:`.state_commit`).

Each function is one plan lookup (:func:`~.descriptor.get_plan`, which validates the state tensors the first
time) and one launch (:func:`~.state_commit.launch`, which checks the index tensors); they check nothing
themselves, so their errors name the arguments of :func:`~.state_commit.fused_commit` they map to.  Index
semantics, plan caching and CUDA-graph capture as :func:`~.state_commit.fused_commit`.
"""

from __future__ import annotations

import torch

from ._validate import _GRID_YZ_MAX
from .descriptor import get_plan
from .state_commit import launch


def conv_commit(*, conv_dst, conv_src, accept_steps, accept_slots, track_steps=None, track_slots=None) -> None:
    """``conv_dst[l, slot] = conv_src[l, r, s]`` for every valid row and layer: one conv pair, one launch.

    conv_dst: ``[L, slots+1, dim, K-1]`` (``conv_dsts[0]``); conv_src: ``[L, R, D, dim, K-1]``
    (``conv_srcs[0]``), the deduplicated overlapping view or a dense buffer; any strides.
    """
    plan = get_plan([conv_dst], [conv_src], None, None)
    launch(plan, accept=(accept_steps, accept_slots), track=(track_steps, track_slots))


def ssm_commit(*, ssm_dst, ssm_src, accept_steps, accept_slots, track_steps=None, track_slots=None) -> None:
    """``ssm_dst[l, slot] = ssm_src[l, r, s]`` for every valid row and layer: the SSM pair alone, one launch.

    ssm_dst: ``[L, slots+1, *ssm_shape]``; ssm_src: ``[L, R, D, *ssm_shape]``; the layer, slot, row and
    step strides are free, the ``*ssm_shape`` dims must be dense.
    """
    plan = get_plan([], [], ssm_dst, ssm_src)
    launch(plan, ssm=(ssm_src, ssm_dst), accept=(accept_steps, accept_slots), track=(track_steps, track_slots))


def tail_copy(src, dst, src_blocks, dst_blocks, offsets) -> None:
    """vLLM's DS tail copy: ``dst[dst_blocks[r], :, 0:W-b] = src[src_blocks[r], :, b:W]``, ``b = offsets[r]``,
    and ``dst[dst_blocks[r], :, W-b:W]`` untouched.

    src: ``[Ns, dim, W]``, dst: ``[Nd, dim, W]`` (any strides, same dtype and device, may be the same
    tensor: an in-place left shift is memmove-safe); a ``dst`` whose elements may share memory is refused.
    src_blocks, dst_blocks, offsets: ``[N]`` int32/int64.  A negative or out-of-range block, or an offset
    outside ``[0, W]``, skips the request; so does a no-op copy (``b == 0`` from a block onto itself).
    Requests whose destination overlaps another request's source or destination block race (as in vLLM).

    It is the kernel's tail mode with one layer: ``conv_dsts[0] = dst[None]``, ``conv_srcs[0] =
    src[None, :, None]`` (one step), ``accept_steps = offsets``, ``accept_slots = dst_blocks`` and the
    source-row table ``src_rows = src_blocks``; one launch per 65535 requests.
    """
    if getattr(src, "ndim", None) != 3 or getattr(dst, "ndim", None) != 3:
        raise ValueError(
            f"tail_copy: src and dst must be [blocks, dim, W] tensors, got {getattr(src, 'shape', type(src))} "
            f"and {getattr(dst, 'shape', type(dst))}"
        )
    # cached with dst itself: the views are temporary, the plan must outlive the call
    plan = get_plan([dst[None]], [src[None, :, None]], None, None, tail=True, owner=dst)
    n = offsets.shape[0] if isinstance(offsets, torch.Tensor) and offsets.ndim == 1 else 0
    if n <= _GRID_YZ_MAX:
        launch(plan, accept=(offsets, dst_blocks), src_rows=src_blocks)
        return
    if getattr(src_blocks, "shape", None) != offsets.shape or getattr(dst_blocks, "shape", None) != offsets.shape:
        raise ValueError("tail_copy: src_blocks, dst_blocks and offsets must have one entry per request")
    for i in range(0, n, _GRID_YZ_MAX):
        j = i + _GRID_YZ_MAX
        launch(plan, accept=(offsets[i:j], dst_blocks[i:j]), src_rows=src_blocks[i:j])
