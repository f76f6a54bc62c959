"""vLLM's "DS tail copy" for a dim-first state ``[blocks, dim, W]``, through the
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
:func:`.fused_commit` kernel in its tail mode (see there), with one layer, the
source blocks as source rows (``src_rows = src_blocks``), ``steps = offsets``,
``slots = dst_blocks`` and ``K-1 = W``.  Grid: ``(dim tiles, 1, requests)``, one
launch per 65535 requests.
"""

from __future__ import annotations

import torch

from ._common import (
    _GRID_YZ_MAX,
    INDEX_DTYPES,
    check_same_device,
    check_state_tensor,
    may_overlap_itself,
)
from .fused_commit import get_plan, launch_plan

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
