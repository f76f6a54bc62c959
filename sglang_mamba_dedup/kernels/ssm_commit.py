"""Single-kind SSM (temporal) state commit.

For each index set ``(steps, slots)`` and each valid row ``r``
(``s = steps[r]``, ``slot = slots[r]``, see ``_common``), for every layer ``l``::

    ssm_dst[l, slot] = ssm_src[l, r, s]        # one [*ssm_shape] entry

``ssm_dst`` is ``[L, slots+1, *ssm_shape]`` and ``ssm_src`` ``[L, R, D, *ssm_shape]``;
the layer/slot/row/step strides are free, the ``*ssm_shape`` dims must be dense.

Grid: ``(entry tiles, L, rows)``, accept rows first, then track rows.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._common import (
    _GRID_YZ_MAX,
    _INT32_MAX,
    _copy_flat_tile,
    _load_row_target,
    check_index_pair,
    check_same_device,
    check_state_tensor,
    entry_is_dense,
    int_dtype_for,
    launch_config,
)


@triton.jit(do_not_specialize=["n_acc"])
def _ssm_commit_kernel(
    src_ptr,
    dst_ptr,
    acc_steps_ptr,
    acc_slots_ptr,
    trk_steps_ptr,
    trk_slots_ptr,
    n_acc,
    n_steps,
    n_slots,
    s_l,
    s_r,
    s_t,
    d_l,
    d_s,
    numel,
    BLOCK: tl.constexpr,
    EVEN: tl.constexpr,
    HAS_TRACK: tl.constexpr,
):
    tile = tl.program_id(0)
    layer = tl.program_id(1).to(tl.int64)
    r, step, slot, valid = _load_row_target(
        tl.program_id(2), n_acc, acc_steps_ptr, acc_slots_ptr, trk_steps_ptr, trk_slots_ptr, n_steps, n_slots, HAS_TRACK
    )
    if valid:
        _copy_flat_tile(
            src_ptr,
            dst_ptr,
            layer * s_l + r * s_r + step * s_t,
            layer * d_l + slot * d_s,
            tile,
            numel,
            BLOCK,
            EVEN,
        )


def ssm_commit(*, ssm_dst, ssm_src, accept_steps, accept_slots, track_steps=None, track_slots=None) -> None:
    """Commit the accepted (and tracked) SSM state of every request, all layers, one launch.

    Index semantics as :func:`fused_commit`.
    """
    check_state_tensor("ssm_dst", ssm_dst, 2)
    check_state_tensor("ssm_src", ssm_src, 3)
    device = ssm_dst.device
    check_same_device(device, ssm_src=ssm_src)
    if ssm_src.ndim != ssm_dst.ndim + 1:
        raise ValueError(f"ssm_commit: ssm_src must have one more dim than ssm_dst: {tuple(ssm_src.shape)} vs {tuple(ssm_dst.shape)}")
    if ssm_dst.dtype != ssm_src.dtype:
        raise TypeError(f"ssm_commit: ssm_dst is {ssm_dst.dtype} but ssm_src is {ssm_src.dtype}")
    if ssm_src.shape[0] != ssm_dst.shape[0] or tuple(ssm_src.shape[3:]) != tuple(ssm_dst.shape[2:]):
        raise ValueError(f"ssm_commit: shape mismatch: ssm_dst {tuple(ssm_dst.shape)} vs ssm_src {tuple(ssm_src.shape)}")
    if not entry_is_dense(ssm_dst, 2) or not entry_is_dense(ssm_src, 3):
        raise ValueError(f"ssm_commit: the state dims must be dense in ssm_dst {tuple(ssm_dst.stride())} and ssm_src {tuple(ssm_src.stride())}")
    numel = 1
    for n in ssm_dst.shape[2:]:
        numel *= n
    if numel > _INT32_MAX:
        raise ValueError("ssm_commit: one state entry has more than 2**31-1 elements")
    L = ssm_dst.shape[0]
    n_src_rows, n_steps = ssm_src.shape[1], ssm_src.shape[2]
    n_acc = check_index_pair("accept_steps", accept_steps, "accept_slots", accept_slots, device, n_src_rows)
    n_trk = 0
    if track_steps is not None or track_slots is not None:
        if track_steps is None or track_slots is None:
            raise ValueError("ssm_commit: track_steps and track_slots must both be given or both be None")
        n_trk = check_index_pair("track_steps", track_steps, "track_slots", track_slots, device, n_src_rows)
    else:
        track_steps, track_slots = accept_steps, accept_slots
    n_rows = n_acc + n_trk
    if n_rows == 0 or numel == 0 or L == 0:
        return
    if n_rows > _GRID_YZ_MAX or L > _GRID_YZ_MAX:
        raise ValueError(f"ssm_commit: at most {_GRID_YZ_MAX} rows and layers per launch, got {n_rows} rows, {L} layers")
    block, warps = launch_config("ssm", ssm_dst.element_size())
    ityp = int_dtype_for(ssm_dst.element_size())
    _ssm_commit_kernel[(triton.cdiv(numel, block), L, n_rows)](
        ssm_src.view(ityp),
        ssm_dst.view(ityp),
        accept_steps,
        accept_slots,
        track_steps,
        track_slots,
        n_acc,
        n_steps,
        ssm_dst.shape[1],
        ssm_src.stride(0),
        ssm_src.stride(1),
        ssm_src.stride(2),
        ssm_dst.stride(0),
        ssm_dst.stride(1),
        numel,
        BLOCK=block,
        EVEN=numel % block == 0,
        HAS_TRACK=n_trk > 0,
        num_warps=warps,
    )
