"""The single-kind entry points, each one launch of the commit kernel (:mod:`.commit`).

conv_commit
-----------
Single-kind conv-window commit, through the fused commit kernel.

For each index set ``(steps, slots)`` and each valid row ``r``
(``s = steps[r]``, ``slot = slots[r]``, see :mod:`._validate`), for every layer ``l``::

    conv_dst[l, slot, d, w] = conv_src[l, r, s, d, w]     d < dim, w < K-1

``conv_src`` is ``[L, R, D, dim, K-1]`` with any strides: the deduplicated
overlapping view (``view[l, r, t, d, w] == phys[l, r, d, t + w]``, over
``phys [L, R, dim, D+K-2]``) or a dense buffer.  ``conv_dst`` is
``[L, slots+1, dim, K-1]`` with any strides.

It is :func:`~.commit.fused_commit` with one conv pair and no SSM pair: one launch, grid
``(window tiles, L, rows)``, accept rows first, then track rows.

ssm_commit
----------
Single-kind SSM (temporal) state commit, through the fused commit kernel.

For each index set ``(steps, slots)`` and each valid row ``r``
(``s = steps[r]``, ``slot = slots[r]``, see :mod:`._validate`), for every layer ``l``::

    ssm_dst[l, slot] = ssm_src[l, r, s]        # one [*ssm_shape] entry

``ssm_dst`` is ``[L, slots+1, *ssm_shape]`` and ``ssm_src`` ``[L, R, D, *ssm_shape]``;
the layer/slot/row/step strides are free, the ``*ssm_shape`` dims must be dense.

It is :func:`~.commit.fused_commit` with no conv pair: one launch, grid
``(entry tiles, L, rows)``, accept rows first, then track rows.

tail_copy
---------
vLLM's "DS tail copy" for a dim-first state ``[blocks, dim, W]``, through the
fused commit kernel.

For each request ``r`` with ``b = offsets[r]``::

    dst[dst_blocks[r], d, 0:W-b] = src[src_blocks[r], d, b:W]     for every d

and ``dst[dst_blocks[r], d, W-b:W]`` is left untouched.  A negative or
out-of-range block, or an offset outside ``[0, W]``, skips the request; so does
a no-op copy (``b == 0`` from a block onto itself, or ``b == W``).

Memmove-safe when ``src`` and ``dst`` are the same tensor and the same block (an
in-place left shift): one program owns whole rows (all ``W`` columns of its dim
rows), loads the entire shifted window, then a CTA barrier, then stores.
Requests whose destination overlaps another request's source or destination
block race (as in vLLM): keep their blocks disjoint.

A tail copy with offset ``b`` is a window read at step ``b``: the
:func:`~.commit.fused_commit` kernel in its tail mode (see there), with one layer, the
source blocks as source rows (``src_rows = src_blocks``), ``steps = offsets``,
``slots = dst_blocks`` and ``K-1 = W``.  Grid: ``(dim tiles, 1, requests)``, one
launch per 65535 requests.
"""

from __future__ import annotations

import torch

from ._validate import (
    _GRID_YZ_MAX,
    _INT32_MAX,
    INDEX_DTYPES,
    check_same_device,
    check_state_tensor,
    entry_is_dense,
    may_overlap_itself,
)
from .commit import get_plan, launch_plan


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


_MAX_W = 4096


def tail_copy(src, dst, src_blocks, dst_blocks, offsets) -> None:
    """``dst[dst_blocks[r], :, 0:W-b] = src[src_blocks[r], :, b:W]``, ``b = offsets[r]``.

    src: ``[Ns, dim, W]``, dst: ``[Nd, dim, W]`` (any strides, same dtype and device,
    may be the same tensor; a ``dst`` that overlaps itself, e.g. a block stride of 0, is
    refused with ValueError). src_blocks, dst_blocks, offsets: ``[N]`` int32/int64.
    Plan caching and CUDA-graph capture as :func:`fused_commit`.
    """
    check_state_tensor("src", src, 3)
    check_state_tensor("dst", dst, 3)
    device = dst.device
    check_same_device(device, src=src)
    if src.ndim != 3 or dst.ndim != 3:
        raise ValueError(
            f"tail_copy: src and dst must be [blocks, dim, W], got {tuple(src.shape)} and {tuple(dst.shape)}"
        )
    if src.dtype != dst.dtype:
        raise TypeError(f"tail_copy: src is {src.dtype} but dst is {dst.dtype}")
    if src.shape[1:] != dst.shape[1:]:
        raise ValueError(f"tail_copy: (dim, W) mismatch: src {tuple(src.shape)} vs dst {tuple(dst.shape)}")
    if may_overlap_itself(dst):  # the source may alias itself: it is only read
        raise ValueError(
            f"tail_copy: dst overlaps itself (shape {tuple(dst.shape)}, stride {tuple(dst.stride())}): "
            f"two destination elements share memory (or its strides cannot rule that out), so "
            f"their writes would race; pass a dst whose blocks and rows are distinct memory "
            f"(no expand()ed, zero-stride or as_strided-overlapping dims)"
        )
    n = None
    for name, t in (("src_blocks", src_blocks), ("dst_blocks", dst_blocks), ("offsets", offsets)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tail_copy: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in INDEX_DTYPES:
            raise TypeError(f"tail_copy: {name} must be int32 or int64, got {t.dtype}")
        if t.ndim != 1:
            raise ValueError(f"tail_copy: {name} must be 1-D, got shape {tuple(t.shape)}")
        if t.device != device:
            raise ValueError(f"tail_copy: {name} is on {t.device}, expected {device}")
        if t.numel() > 1 and t.stride(0) != 1:
            raise ValueError(f"tail_copy: {name} must be contiguous")
        if n is None:
            n = t.shape[0]
        elif t.shape[0] != n:
            raise ValueError(
                f"tail_copy: index length mismatch: src_blocks {src_blocks.shape[0]}, "
                f"dst_blocks {dst_blocks.shape[0]}, offsets {offsets.shape[0]}"
            )
    assert n is not None  # the three index tensors were checked above
    _, dim, W = dst.shape
    if W > _MAX_W:
        raise ValueError(f"tail_copy: W={W} is over the supported {_MAX_W}")
    if n == 0 or dim == 0 or W == 0:
        return
    # One layer; the source blocks as source rows with one step, which the tail mode turns
    # into a shift of the window by `offsets[r]` columns (clipped to the block).
    plan = get_plan([dst[None]], [src[None, :, None]], None, None, "tail_copy", tail=True, owner=dst)
    for i in range(0, n, _GRID_YZ_MAX):
        j = i + _GRID_YZ_MAX
        if i == 0 and n <= j:
            launch_plan(plan, None, None, offsets, dst_blocks, None, None, "tail_copy", src_rows=src_blocks)
        else:
            launch_plan(
                plan, None, None, offsets[i:j], dst_blocks[i:j], None, None, "tail_copy", src_rows=src_blocks[i:j]
            )
