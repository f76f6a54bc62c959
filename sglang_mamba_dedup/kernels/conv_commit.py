"""Single-kind conv-window commit.

For each index set ``(steps, slots)`` and each valid row ``r``
(``s = steps[r]``, ``slot = slots[r]``, see ``_common``), for every layer ``l``::

    conv_dst[l, slot, d, w] = conv_src[l, r, s, d, w]     d < dim, w < K-1

``conv_src`` is ``[L, R, D, dim, K-1]`` with any strides: the deduplicated
overlapping view (``view[l, r, t, d, w] == phys[l, r, d, t + w]``, over
``phys [L, R, dim, D+K-2]``) or a dense buffer.  ``conv_dst`` is
``[L, slots+1, dim, K-1]`` with any strides.

Grid: ``(window tiles, L, rows)``, accept rows first, then track rows.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._common import (
    _GRID_YZ_MAX,
    _INT32_MAX,
    _copy_window_tile,
    _load_row_target,
    check_index_pair,
    check_same_device,
    check_state_tensor,
    int_dtype_for,
    launch_config,
)


@triton.jit(do_not_specialize=["n_acc"])
def _conv_commit_kernel(
    src_ptr,
    dst_ptr,
    acc_steps_ptr,
    acc_slots_ptr,
    trk_steps_ptr,
    trk_slots_ptr,
    n_acc,
    n_steps,
    n_slots,
    dim,
    s_l,
    s_r,
    s_t,
    s_d,
    s_w,
    d_l,
    d_s,
    d_d,
    d_w,
    KM1: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_TRACK: tl.constexpr,
):
    tile = tl.program_id(0)
    layer = tl.program_id(1).to(tl.int64)
    r, step, slot, valid = _load_row_target(
        tl.program_id(2), n_acc, acc_steps_ptr, acc_slots_ptr, trk_steps_ptr, trk_slots_ptr, n_steps, n_slots, HAS_TRACK
    )
    if valid:
        _copy_window_tile(
            src_ptr,
            dst_ptr,
            layer * s_l + r * s_r + step * s_t,
            layer * d_l + slot * d_s,
            tile,
            dim,
            s_d,
            s_w,
            d_d,
            d_w,
            KM1,
            BLOCK,
        )


def conv_commit(*, conv_dst, conv_src, accept_steps, accept_slots, track_steps=None, track_slots=None) -> None:
    """Commit the accepted (and tracked) conv window of every request, all layers, one launch.

    conv_dst: ``[L, slots+1, dim, K-1]``; conv_src: ``[L, R, D, dim, K-1]``; any strides.
    Index semantics as :func:`fused_commit`.
    """
    check_state_tensor("conv_dst", conv_dst, 4)
    check_state_tensor("conv_src", conv_src, 5)
    device = conv_dst.device
    check_same_device(device, conv_src=conv_src)
    if conv_dst.ndim != 4 or conv_src.ndim != 5:
        raise ValueError(f"conv_commit: conv_dst must be 4-D and conv_src 5-D, got {tuple(conv_dst.shape)} and {tuple(conv_src.shape)}")
    if conv_dst.dtype != conv_src.dtype:
        raise TypeError(f"conv_commit: conv_dst is {conv_dst.dtype} but conv_src is {conv_src.dtype}")
    L, n_slots, dim, km1 = conv_dst.shape
    if conv_src.shape[0] != L or tuple(conv_src.shape[3:]) != (dim, km1):
        raise ValueError(f"conv_commit: shape mismatch: conv_dst {tuple(conv_dst.shape)} vs conv_src {tuple(conv_src.shape)}")
    if dim * km1 > _INT32_MAX:
        raise ValueError("conv_commit: one window has more than 2**31-1 elements")
    n_src_rows, n_steps = conv_src.shape[1], conv_src.shape[2]
    n_acc = check_index_pair("accept_steps", accept_steps, "accept_slots", accept_slots, device, n_src_rows)
    n_trk = 0
    if track_steps is not None or track_slots is not None:
        if track_steps is None or track_slots is None:
            raise ValueError("conv_commit: track_steps and track_slots must both be given or both be None")
        n_trk = check_index_pair("track_steps", track_steps, "track_slots", track_slots, device, n_src_rows)
    else:
        track_steps, track_slots = accept_steps, accept_slots
    n_rows = n_acc + n_trk
    if n_rows == 0 or dim * km1 == 0 or L == 0:
        return
    if n_rows > _GRID_YZ_MAX or L > _GRID_YZ_MAX:
        raise ValueError(f"conv_commit: at most {_GRID_YZ_MAX} rows and layers per launch, got {n_rows} rows, {L} layers")
    block, warps = launch_config("conv")
    ityp = int_dtype_for(conv_dst.element_size())
    _conv_commit_kernel[(triton.cdiv(dim * km1, block), L, n_rows)](
        conv_src.view(ityp),
        conv_dst.view(ityp),
        accept_steps,
        accept_slots,
        track_steps,
        track_slots,
        n_acc,
        n_steps,
        n_slots,
        dim,
        *conv_src.stride(),
        *conv_dst.stride(),
        KM1=km1,
        BLOCK=block,
        HAS_TRACK=n_trk > 0,
        num_warps=warps,
    )
