"""Fused post-verify commit: every layer, every conv kind, the SSM state, the
accept and the track index sets, in one launch.

For each index set ``(steps, slots)`` and each row ``r`` with ``s = steps[r]``
and ``slot = slots[r]`` valid (see ``_common``)::

    conv_dsts[i][l, slot] = conv_srcs[i][l, r, s]    # [dim_i, K-1] window
    ssm_dst[l, slot]      = ssm_src[l, r, s]         # [*ssm_shape]

for every layer ``l``.  ``conv_srcs[i]`` may be the deduplicated overlapping
view (``view[l, r, t, d, w] == phys[l, r, d, t + w]``) or a dense buffer: the
kernel walks the view's strides.  Destinations may have any strides (views over
larger pools).  The SSM entries (trailing dims) must be dense on both sides.

Grid: ``(conv tiles + ssm tiles, L, rows)``; axis 0 enumerates the tiles of one
(row, layer) pair, conv kinds first.  A skipped row costs its programs two
index loads each.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import triton
import triton.language as tl

from ._common import (
    _GRID_YZ_MAX,
    _INT32_MAX,
    _copy_flat_tile,
    _copy_window_tile,
    _load_row_target,
    check_index_pair,
    check_same_device,
    check_state_tensor,
    entry_is_dense,
    int_dtype_for,
    launch_config,
)

# One int64 row per conv kind (the kernel uses the literal 16 as the row stride):
# 0 src ptr, 1 dst ptr, 2 dim, 3-7 src strides (l, r, t, d, w), 8-11 dst strides
# (l, slot, d, w), 12 first tile of this kind, 13-15 padding; a last row holds the
# total conv tile count in column 12.
_META_COLS = 16
_CACHE_SIZE = 8


@triton.jit(do_not_specialize=["n_acc"])
def _fused_commit_kernel(
    conv_meta_ptr,
    ssm_src_ptr,
    ssm_dst_ptr,
    acc_steps_ptr,
    acc_slots_ptr,
    trk_steps_ptr,
    trk_slots_ptr,
    n_acc,
    n_steps,
    n_slots,
    ss_l,
    ss_r,
    ss_t,
    sd_l,
    sd_s,
    ssm_numel,
    conv_tiles,
    NUM_CONV: tl.constexpr,
    CONV_ITEMSIZE: tl.constexpr,
    KM1: tl.constexpr,
    CONV_BLOCK: tl.constexpr,
    HAS_SSM: tl.constexpr,
    SSM_BLOCK: tl.constexpr,
    SSM_EVEN: tl.constexpr,
    HAS_TRACK: tl.constexpr,
):
    tile = tl.program_id(0)
    layer = tl.program_id(1).to(tl.int64)
    pid_row = tl.program_id(2)
    r, step, slot, valid = _load_row_target(
        pid_row, n_acc, acc_steps_ptr, acc_slots_ptr, trk_steps_ptr, trk_slots_ptr, n_steps, n_slots, HAS_TRACK
    )
    if valid:
        if tile < conv_tiles:
            for k in tl.static_range(NUM_CONV):
                row = conv_meta_ptr + k * 16
                t0 = tl.load(row + 12)
                t1 = tl.load(row + 16 + 12)
                if (tile >= t0) & (tile < t1):
                    if CONV_ITEMSIZE == 2:
                        src = tl.load(row + 0).to(tl.pointer_type(tl.int16))
                        dst = tl.load(row + 1).to(tl.pointer_type(tl.int16))
                    else:
                        src = tl.load(row + 0).to(tl.pointer_type(tl.int32))
                        dst = tl.load(row + 1).to(tl.pointer_type(tl.int32))
                    dim = tl.load(row + 2)
                    src_base = layer * tl.load(row + 3) + r * tl.load(row + 4) + step * tl.load(row + 5)
                    dst_base = layer * tl.load(row + 8) + slot * tl.load(row + 9)
                    _copy_window_tile(
                        src,
                        dst,
                        src_base,
                        dst_base,
                        tile - t0,
                        dim,
                        tl.load(row + 6),
                        tl.load(row + 7),
                        tl.load(row + 10),
                        tl.load(row + 11),
                        KM1,
                        CONV_BLOCK,
                    )
        else:
            if HAS_SSM:
                _copy_flat_tile(
                    ssm_src_ptr,
                    ssm_dst_ptr,
                    layer * ss_l + r * ss_r + step * ss_t,
                    layer * sd_l + slot * sd_s,
                    tile - conv_tiles,
                    ssm_numel,
                    SSM_BLOCK,
                    SSM_EVEN,
                )


class _Plan:
    __slots__ = (
        "meta",
        "ssm_src",
        "ssm_dst",
        "n_rows_src",
        "n_steps",
        "n_slots",
        "n_layers",
        "ssm_args",
        "conv_tiles",
        "tiles",
        "device",
        "refs",
        "calls",
    )


_plans: "OrderedDict[tuple, _Plan]" = OrderedDict()


def _layout(t) -> tuple | None:
    # Everything a plan reads from one tensor.  data_ptr() includes the storage offset.
    return None if t is None else (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device)


def _plan_key(conv_dsts, conv_srcs, ssm_dst, ssm_src) -> tuple:
    # Keyed on the layout of every tensor the plan describes, not on the tensor objects:
    # a tensor changed in place (transpose_, as_strided_, set_, resize_) or a new tensor
    # under a recycled id() gets its own plan.  A plan is a function of exactly these
    # values, so a hit is correct whichever tensors produced it.  A few attribute reads
    # per tensor, no device work.
    return (_layout(ssm_dst), _layout(ssm_src), len(conv_dsts), *map(_layout, conv_dsts), *map(_layout, conv_srcs))


def build_plan(conv_dsts, conv_srcs, ssm_dst, ssm_src, fn_name: str = "fused_commit") -> _Plan:
    """Validate the state tensors and pack their pointers and strides once."""
    conv_dsts = list(conv_dsts)
    conv_srcs = list(conv_srcs)
    if len(conv_dsts) != len(conv_srcs):
        raise ValueError(f"{fn_name}: {len(conv_dsts)} conv_dsts but {len(conv_srcs)} conv_srcs")
    if (ssm_dst is None) != (ssm_src is None):
        raise ValueError(f"{fn_name}: ssm_dst and ssm_src must both be given or both be None")
    if not conv_dsts and ssm_dst is None:
        raise ValueError(f"{fn_name}: nothing to commit (no conv pairs and no SSM pair)")

    first = conv_dsts[0] if conv_dsts else ssm_dst
    check_state_tensor("conv_dsts[0]" if conv_dsts else "ssm_dst", first, 2)
    device = first.device
    n_layers = first.shape[0]
    n_slots = first.shape[1]
    geom = None  # (R, D) shared by every source

    def check_src_dst(dname, dst, sname, src, dst_ndim):
        nonlocal geom
        check_state_tensor(dname, dst, dst_ndim)
        check_state_tensor(sname, src, dst_ndim + 1)
        check_same_device(device, **{dname: dst, sname: src})
        if src.ndim != dst.ndim + 1:
            raise ValueError(f"{fn_name}: {sname} must have one more dim (the step) than {dname}: "
                             f"{tuple(src.shape)} vs {tuple(dst.shape)}")
        if dst.dtype != src.dtype:
            raise TypeError(f"{fn_name}: {dname} is {dst.dtype} but {sname} is {src.dtype}")
        if dst.shape[0] != n_layers or src.shape[0] != n_layers:
            raise ValueError(f"{fn_name}: layer count mismatch: {dname} {tuple(dst.shape)}, {sname} "
                             f"{tuple(src.shape)}, expected {n_layers} layers")
        if dst.shape[1] != n_slots:
            raise ValueError(f"{fn_name}: {dname} has {dst.shape[1]} slots, expected {n_slots} like the first destination")
        if tuple(dst.shape[2:]) != tuple(src.shape[3:]):
            raise ValueError(f"{fn_name}: state shape mismatch: {dname} {tuple(dst.shape)} vs {sname} {tuple(src.shape)}")
        if geom is None:
            geom = (src.shape[1], src.shape[2])
        elif geom != (src.shape[1], src.shape[2]):
            raise ValueError(f"{fn_name}: {sname} has rows/steps {tuple(src.shape[1:3])}, expected {geom}")
        if dst.numel() and dst[0, 0].numel() > _INT32_MAX:
            raise ValueError(f"{fn_name}: one {dname} entry has more than 2**31-1 elements")

    rows = []
    tile_start = 0
    km1 = None
    conv_itemsize = None
    conv_block, conv_warps = launch_config("conv")
    for i, (dst, src) in enumerate(zip(conv_dsts, conv_srcs)):
        check_src_dst(f"conv_dsts[{i}]", dst, f"conv_srcs[{i}]", src, 4)
        if km1 is None:
            km1, conv_itemsize = dst.shape[3], dst.element_size()
        if dst.shape[3] != km1:
            raise ValueError(f"{fn_name}: all conv kinds must share K-1; conv_dsts[{i}] has {dst.shape[3]}, expected {km1}")
        if dst.element_size() != conv_itemsize:
            raise TypeError(f"{fn_name}: all conv kinds must share one element size; conv_dsts[{i}] is {dst.dtype}")
        dim = dst.shape[2]
        n_tiles = triton.cdiv(dim * km1, conv_block) if dim * km1 > 0 else 0
        rows.append([src.data_ptr(), dst.data_ptr(), dim, *src.stride(), *dst.stride(), tile_start, 0, 0, 0])
        tile_start += n_tiles
    rows.append([0] * 12 + [tile_start, 0, 0, 0])  # sentinel row: end of the last kind
    assert all(len(r) == _META_COLS for r in rows)

    plan = _Plan()
    plan.device = device
    plan.n_layers = n_layers
    plan.n_slots = n_slots
    plan.conv_tiles = tile_start
    plan.meta = torch.tensor(rows, dtype=torch.int64).to(device)

    ssm_numel = 0
    if ssm_dst is not None:
        check_src_dst("ssm_dst", ssm_dst, "ssm_src", ssm_src, 2)
        if not entry_is_dense(ssm_dst, 2) or not entry_is_dense(ssm_src, 3):
            raise ValueError(f"{fn_name}: the SSM state dims must be dense (row-major) in both ssm_dst "
                             f"({tuple(ssm_dst.stride())}) and ssm_src ({tuple(ssm_src.stride())})")
        ssm_numel = 1
        for n in ssm_dst.shape[2:]:
            ssm_numel *= n
        ityp = int_dtype_for(ssm_dst.element_size())
        plan.ssm_src = ssm_src.view(ityp)
        plan.ssm_dst = ssm_dst.view(ityp)
        plan.ssm_args = (ssm_src.stride(0), ssm_src.stride(1), ssm_src.stride(2),
                         ssm_dst.stride(0), ssm_dst.stride(1), ssm_numel)
    else:
        plan.ssm_src = plan.meta
        plan.ssm_dst = plan.meta
        plan.ssm_args = (0, 0, 0, 0, 0, 0)

    plan.n_rows_src, plan.n_steps = geom
    if n_layers > _GRID_YZ_MAX:
        raise ValueError(f"{fn_name}: at most {_GRID_YZ_MAX} layers per launch, got {n_layers}")
    ssm_block, ssm_warps = launch_config("ssm", ssm_dst.element_size() if ssm_dst is not None else 4)
    ssm_tiles = triton.cdiv(ssm_numel, ssm_block) if ssm_numel else 0
    plan.tiles = tile_start + ssm_tiles
    fixed = (plan.n_steps, n_slots, *plan.ssm_args, tile_start)
    constexprs = dict(
        NUM_CONV=len(conv_dsts),
        CONV_ITEMSIZE=conv_itemsize or 2,
        KM1=km1 or 1,
        CONV_BLOCK=conv_block,
        HAS_SSM=ssm_dst is not None,
        SSM_BLOCK=ssm_block,
        SSM_EVEN=ssm_numel % ssm_block == 0,
        num_warps=max(ssm_warps, conv_warps),
    )
    # everything after n_acc, ready for each track on/off: (positional, keyword)
    plan.calls = {has_track: (fixed, dict(constexprs, HAS_TRACK=has_track)) for has_track in (False, True)}
    return plan


def get_plan(conv_dsts, conv_srcs, ssm_dst, ssm_src, fn_name: str = "fused_commit") -> _Plan:
    try:
        key = _plan_key(conv_dsts, conv_srcs, ssm_dst, ssm_src)
    except (AttributeError, TypeError):  # not a tensor: build_plan says which
        return build_plan(conv_dsts, conv_srcs, ssm_dst, ssm_src, fn_name)
    plan = _plans.get(key)
    if plan is None:
        plan = build_plan(conv_dsts, conv_srcs, ssm_dst, ssm_src, fn_name)
        # Not needed for correctness (the key is): they keep the memory the table points
        # at allocated while the plan is cached, as the SSM views it launches with do.
        plan.refs = (tuple(conv_dsts), tuple(conv_srcs), ssm_dst, ssm_src)
        _plans[key] = plan
        if len(_plans) > _CACHE_SIZE:
            _plans.popitem(last=False)
    else:
        _plans.move_to_end(key)  # least recently used goes first
    return plan


def clear_plan_cache() -> None:
    """Drop the cached descriptor tables (and the references they hold)."""
    _plans.clear()


def launch_plan(plan: _Plan, accept_steps, accept_slots, track_steps, track_slots, fn_name: str) -> None:
    n_acc = check_index_pair("accept_steps", accept_steps, "accept_slots", accept_slots, plan.device, plan.n_rows_src)
    has_track = track_steps is not None or track_slots is not None
    if has_track:
        if track_steps is None or track_slots is None:
            raise ValueError(f"{fn_name}: track_steps and track_slots must both be given or both be None")
        n_trk = check_index_pair("track_steps", track_steps, "track_slots", track_slots, plan.device, plan.n_rows_src)
    else:
        n_trk = 0
        track_steps, track_slots = accept_steps, accept_slots
    n_rows = n_acc + n_trk
    if n_rows == 0 or plan.tiles == 0:
        return
    if n_rows > _GRID_YZ_MAX:
        raise ValueError(f"{fn_name}: at most {_GRID_YZ_MAX} rows (accept + track) per launch, got {n_rows}")
    fixed, kw = plan.calls[n_trk > 0]
    _fused_commit_kernel[(plan.tiles, plan.n_layers, n_rows)](
        plan.meta, plan.ssm_src, plan.ssm_dst, accept_steps, accept_slots, track_steps, track_slots, n_acc,
        *fixed, **kw,
    )


def fused_commit(
    *,
    conv_dsts,
    conv_srcs,
    ssm_dst,
    ssm_src,
    accept_steps,
    accept_slots,
    track_steps=None,
    track_slots=None,
) -> None:
    """Commit the accepted (and tracked) draft step of every request, all
    layers, all conv kinds and the SSM state, in one launch.

    conv_dsts[i]: ``[L, slots+1, dim_i, K-1]``, any strides.
    conv_srcs[i]: ``[L, R, D, dim_i, K-1]``, any strides (dedup view or dense).
    ssm_dst: ``[L, slots+1, *ssm_shape]`` or None; ssm_src: ``[L, R, D, *ssm_shape]`` or None
    (the ``*ssm_shape`` dims dense on both sides).
    accept_steps / accept_slots: ``[B]`` int32 or int64 on the states' device, ``B <= R``;
    row r copies source row r at step ``accept_steps[r]`` into slot ``accept_slots[r]``;
    a negative or out-of-range step or slot skips the row (in the kernel).
    track_steps / track_slots: optional second index set, same semantics, same launch.

    No host synchronisation; capturable in a CUDA graph once a first call with the
    same state tensors (same pointers, shapes, strides) has run outside capture; a
    tensor whose layout changed since, even in place, gets a fresh plan.  Duplicated
    destination slots: see ``sglang_mamba_dedup.kernels._common``.
    """
    if not isinstance(conv_dsts, (list, tuple)):
        conv_dsts = list(conv_dsts)
    if not isinstance(conv_srcs, (list, tuple)):
        conv_srcs = list(conv_srcs)
    plan = get_plan(conv_dsts, conv_srcs, ssm_dst, ssm_src, "fused_commit")
    launch_plan(plan, accept_steps, accept_slots, track_steps, track_slots, "fused_commit")
