"""vLLM's "DS tail copy" for a dim-first state ``[blocks, dim, W]``.

For each request ``r`` with ``b = offsets[r]``::

    dst[dst_blocks[r], d, 0:W-b] = src[src_blocks[r], d, b:W]     for every d

and ``dst[dst_blocks[r], d, W-b:W]`` is left untouched.  A negative or
out-of-range block, or an offset outside ``[0, W]``, skips the request; so does
a no-op copy (``b == 0`` from a block onto itself, or ``b == W``).

Memmove-safe when ``src`` and ``dst`` are the same tensor and the same block (an
in-place left shift): one program owns whole rows (all ``W`` columns of its
``BLOCK_D`` dim rows), loads the entire shifted window, then a CTA barrier, then
stores.  Requests whose destination overlaps another request's source or
destination block race (as in vLLM): keep their blocks disjoint.

Grid: ``(requests, cdiv(dim, BLOCK_D))``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import (
    _GRID_YZ_MAX,
    INDEX_DTYPES,
    check_same_device,
    check_state_tensor,
    int_dtype_for,
    launch_config,
    may_overlap_itself,
)

_MAX_W = 4096


@triton.jit
def _tail_copy_kernel(
    src_ptr,
    dst_ptr,
    src_blocks_ptr,
    dst_blocks_ptr,
    offsets_ptr,
    n_src_blocks,
    n_dst_blocks,
    dim,
    W,
    s_b,
    s_d,
    s_w,
    d_b,
    d_d,
    d_w,
    SAME_TENSOR: tl.constexpr,
    BLOCK_D: tl.constexpr,
    W_P2: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    dtile = tl.program_id(1)
    sb = tl.load(src_blocks_ptr + r).to(tl.int64)
    db = tl.load(dst_blocks_ptr + r).to(tl.int64)
    b = tl.load(offsets_ptr + r).to(tl.int64)
    valid = (sb >= 0) & (sb < n_src_blocks) & (db >= 0) & (db < n_dst_blocks) & (b >= 0) & (b < W)
    if SAME_TENSOR:
        valid = valid & ((b != 0) | (sb != db))
    if valid:
        d = (dtile * BLOCK_D + tl.arange(0, BLOCK_D)).to(tl.int64)[:, None]
        j = tl.arange(0, W_P2).to(tl.int64)[None, :]
        mask = (d < dim) & (j < W - b)
        vals = tl.load(src_ptr + (sb * s_b + d * s_d + (j + b) * s_w), mask=mask)
        # Every load of this program's rows completes before any store: an
        # in-place shift (same block) cannot read a value it already overwrote.
        tl.debug_barrier()
        tl.store(dst_ptr + (db * d_b + d * d_d + j * d_w), vals, mask=mask)


def tail_copy(src, dst, src_blocks, dst_blocks, offsets) -> None:
    """``dst[dst_blocks[r], :, 0:W-b] = src[src_blocks[r], :, b:W]``, ``b = offsets[r]``.

    src: ``[Ns, dim, W]``, dst: ``[Nd, dim, W]`` (any strides, same dtype and device,
    may be the same tensor; a ``dst`` that overlaps itself, e.g. a block stride of 0, is
    refused with ValueError). src_blocks, dst_blocks, offsets: ``[N]`` int32/int64.
    """
    check_state_tensor("src", src, 3)
    check_state_tensor("dst", dst, 3)
    device = dst.device
    check_same_device(device, src=src)
    if src.ndim != 3 or dst.ndim != 3:
        raise ValueError(f"tail_copy: src and dst must be [blocks, dim, W], got {tuple(src.shape)} and {tuple(dst.shape)}")
    if src.dtype != dst.dtype:
        raise TypeError(f"tail_copy: src is {src.dtype} but dst is {dst.dtype}")
    if src.shape[1:] != dst.shape[1:]:
        raise ValueError(f"tail_copy: (dim, W) mismatch: src {tuple(src.shape)} vs dst {tuple(dst.shape)}")
    if may_overlap_itself(dst):  # the source may alias itself: it is only read
        raise ValueError(f"tail_copy: dst overlaps itself (shape {tuple(dst.shape)}, stride {tuple(dst.stride())}): "
                         f"two destination elements share memory (or its strides cannot rule that out), so "
                         f"their writes would race; pass a dst whose blocks and rows are distinct memory "
                         f"(no expand()ed, zero-stride or as_strided-overlapping dims)")
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
            raise ValueError(f"tail_copy: index length mismatch: src_blocks {src_blocks.shape[0]}, "
                             f"dst_blocks {dst_blocks.shape[0]}, offsets {offsets.shape[0]}")
    _, dim, W = dst.shape
    if W > _MAX_W:
        raise ValueError(f"tail_copy: W={W} is over the supported {_MAX_W}")
    if n == 0 or dim == 0 or W == 0:
        return
    block_d, warps = launch_config("tail")
    n_dtiles = triton.cdiv(dim, block_d)
    if n_dtiles > _GRID_YZ_MAX:
        raise ValueError(f"tail_copy: dim {dim} too large")
    same = src.data_ptr() == dst.data_ptr() and src.stride() == dst.stride()
    ityp = int_dtype_for(dst.element_size())
    _tail_copy_kernel[(n, n_dtiles)](
        src.view(ityp),
        dst.view(ityp),
        src_blocks,
        dst_blocks,
        offsets,
        src.shape[0],
        dst.shape[0],
        dim,
        W,
        *src.stride(),
        *dst.stride(),
        SAME_TENSOR=same,
        BLOCK_D=block_d,
        W_P2=triton.next_power_of_2(W),
        num_warps=warps,
    )
