"""Launch plans of the commit kernel (:mod:`.state_commit`): the one place where state tensors are validated.

A :class:`CommitPlan` (the descriptor table and launch arguments of one set of state tensors) is built once by
:func:`build_plan` and cached by :func:`get_plan`, keyed on every tensor's pointer, shape, strides and dtype, so
it is never reused for other memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import triton
import triton.language as tl
from torch.utils.weak import WeakIdKeyDictionary

from ._validate import (
    _GRID_YZ_MAX,
    _INT32_MAX,
    check_state_tensor,
    entry_is_dense,
    launch_config,
    may_overlap_itself,
)

if TYPE_CHECKING:
    from ._direct_launch import DirectLaunch

# ---------------------------------------------------------------- descriptor table

# One int64 row of META_COLS per conv kind, then a sentinel row whose COL_TILE0 is the
# total conv tile count (the end of the last kind) and whose COL_ACCEPTED_PTR is the accepted
# table's address (a plan with one; the zero-copy commit; 0 otherwise).  build_plan fills the
# rows and the kernel reads them through these same constants.
COL_SRC_PTR = tl.constexpr(0)  # conv_srcs[i].data_ptr()
COL_DST_PTR = tl.constexpr(1)  # conv_dsts[i].data_ptr()
COL_DIM = tl.constexpr(2)  # dim_i
COL_SRC_L = tl.constexpr(3)  # conv_srcs[i] strides: layer,
COL_SRC_R = tl.constexpr(4)  # .. source row,
COL_SRC_T = tl.constexpr(5)  # .. step (the column stride in the tail mode),
COL_SRC_D = tl.constexpr(6)  # .. dim,
COL_SRC_W = tl.constexpr(7)  # .. window column
COL_DST_L = tl.constexpr(8)  # conv_dsts[i] strides: layer,
COL_DST_S = tl.constexpr(9)  # .. slot,
COL_DST_D = tl.constexpr(10)  # .. dim,
COL_DST_W = tl.constexpr(11)  # .. window column
COL_TILE0 = tl.constexpr(12)  # first grid tile (axis 0) of this kind
COL_ACCEPTED_PTR = tl.constexpr(13)  # the sentinel row only: accepted.data_ptr() (0: no accepted table)
META_COLS = tl.constexpr(16)  # row length: 14 columns used, padded to 16

#: Plans kept per first-destination tensor (different sources, tail mode ...); the oldest goes first.
_PLANS_PER_TENSOR = 8
#: The widest window of the tail mode (one program holds whole window rows).
_MAX_TAIL_W = 4096


@dataclass(eq=False)
class CommitPlan:
    """What one launch needs; it holds no reference to the state tensors (their pointers are plain integers)."""

    device: torch.device
    meta: torch.Tensor  # [conv kinds + 1, META_COLS] int64 descriptor table, on ``device``
    ssm_int_dtype: torch.dtype | None  # the SSM pair is copied as this integer type (None: no SSM pair)
    ssm_ptrs: tuple[int, int]  # (ssm_src, ssm_dst) data pointers; ``meta``'s when there is no SSM pair
    n_layers: int  # L
    n_rows_src: int  # R, source rows
    n_steps: int  # D, steps per source row (W in the tail mode)
    n_slots: int  # destination slots
    conv_tiles: int  # grid tiles (axis 0) of all conv kinds; the SSM tiles follow
    tiles: int  # grid axis 0
    tail: bool  # tail mode (see :mod:`.state_commit`)
    accepted: bool  # the launch also records ``accepted[source row] = step + 1`` (the zero-copy commit)
    ssm_track_only: bool  # the SSM pair is copied for track rows only (the zero-copy commit with a track set)
    # (has track set, has source-row table) -> (kernel arguments after n_acc, constexprs and num_warps)
    calls: dict[tuple[bool, bool], tuple[tuple[Any, ...], dict[str, Any]]]
    # the same key -> the direct launcher of the compiled kernel (None: Triton's path only)
    direct: dict[tuple[bool, bool], DirectLaunch | None] = field(default_factory=dict)


def build_plan(
    conv_dsts, conv_srcs, ssm_dst, ssm_src, tail: bool = False, accepted=None, ssm_track_only: bool = False
) -> CommitPlan:
    """Validate the state tensors (shapes: :func:`.commit.fused_commit`) and pack their pointers and strides once.
    ``tail``: the tail mode of :mod:`.state_commit` (one conv pair, ``D = 1``, no SSM pair). ``accepted``: an int32 table
    with one entry per source row; every launch of the plan then also stores ``accepted[src row] = step + 1`` for
    each valid accept row (the zero-copy commit's bookkeeping, in the same launch). ``ssm_track_only``: accept rows
    copy the conv windows only, track rows the conv windows and the SSM state (the zero-copy commit with a track
    set); it needs the SSM pair and at least one conv window tile."""
    conv_dsts = list(conv_dsts)
    conv_srcs = list(conv_srcs)
    if len(conv_dsts) != len(conv_srcs):
        raise ValueError(f"{len(conv_dsts)} conv_dsts but {len(conv_srcs)} conv_srcs")
    if (ssm_dst is None) != (ssm_src is None):
        raise ValueError("ssm_dst and ssm_src must both be given or both be None")
    if not conv_dsts and ssm_dst is None:
        raise ValueError("nothing to commit (no conv pairs and no SSM pair)")
    if tail and (len(conv_dsts) != 1 or ssm_dst is not None):
        raise ValueError("the tail mode takes one conv pair and no SSM pair")
    if tail and accepted is not None:  # its steps are column shifts, not draft steps
        raise ValueError("the tail mode takes no accepted table")
    if ssm_track_only and (ssm_dst is None or not conv_dsts):
        raise ValueError("ssm_track_only takes an SSM pair and at least one conv pair")

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
        for name, t in ((dname, dst), (sname, src)):
            if t.device != device:
                raise ValueError(f"{name} is on {t.device}, expected {device} (all tensors must share one device)")
        if src.ndim != dst.ndim + 1:
            raise ValueError(
                f"{sname} must have one more dim (the step) than {dname}: {tuple(src.shape)} vs {tuple(dst.shape)}"
            )
        if dst.dtype != src.dtype:
            raise TypeError(f"{dname} is {dst.dtype} but {sname} is {src.dtype}")
        if may_overlap_itself(dst):  # two rows to "different" slots would write the same memory (a race)
            raise ValueError(f"{dname} overlaps itself (shape {tuple(dst.shape)}, strides {dst.stride()})")
        if dst.shape[0] != n_layers or src.shape[0] != n_layers:
            raise ValueError(
                f"layer count mismatch: {dname} {tuple(dst.shape)}, {sname} {tuple(src.shape)}, "
                f"expected {n_layers} layers"
            )
        if dst.shape[1] != n_slots:
            raise ValueError(f"{dname} has {dst.shape[1]} slots, expected {n_slots} like the first destination")
        if tuple(dst.shape[2:]) != tuple(src.shape[3:]):
            raise ValueError(f"state shape mismatch: {dname} {tuple(dst.shape)} vs {sname} {tuple(src.shape)}")
        if geom is None:
            geom = (src.shape[1], src.shape[2])
        elif geom != (src.shape[1], src.shape[2]):
            raise ValueError(f"{sname} has rows/steps {tuple(src.shape[1:3])}, expected {geom}")
        if not tail and dst.numel() and dst[0, 0].numel() > _INT32_MAX:
            raise ValueError(f"one {dname} entry has more than 2**31-1 elements")

    rows = []
    tile_start = 0
    km1 = None
    conv_itemsize = None
    conv_block, conv_warps = launch_config("conv")
    for i, (dst, src) in enumerate(zip(conv_dsts, conv_srcs)):
        check_src_dst(f"conv_dsts[{i}]", dst, f"conv_srcs[{i}]", src, 4)
        if dst.ndim != 4:
            raise ValueError(f"conv_dsts[{i}] must be 4-D and conv_srcs[{i}] 5-D, got {tuple(dst.shape)}")
        if km1 is None:
            km1, conv_itemsize = dst.shape[3], dst.element_size()
        if dst.shape[3] != km1:
            raise ValueError(f"all conv kinds must share K-1; conv_dsts[{i}] has {dst.shape[3]}, expected {km1}")
        if dst.element_size() != conv_itemsize:
            raise TypeError(f"all conv kinds must share one element size; conv_dsts[{i}] is {dst.dtype}")
        dim = dst.shape[2]
        if tail:  # whole window rows per tile: at least one row
            if km1 > _MAX_TAIL_W:
                raise ValueError(f"the tail mode takes windows of at most {_MAX_TAIL_W} columns, got {km1}")
            conv_block = max(conv_block, triton.next_power_of_2(km1))
            n_tiles = triton.cdiv(dim, conv_block // km1) if dim * km1 > 0 else 0
        else:
            n_tiles = triton.cdiv(dim * km1, conv_block) if dim * km1 > 0 else 0
        row = [0] * META_COLS.value
        row[COL_SRC_PTR] = src.data_ptr()
        row[COL_DST_PTR] = dst.data_ptr()
        row[COL_DIM] = dim
        row[COL_SRC_L], row[COL_SRC_R], row[COL_SRC_T], row[COL_SRC_D], row[COL_SRC_W] = src.stride()
        row[COL_DST_L], row[COL_DST_S], row[COL_DST_D], row[COL_DST_W] = dst.stride()
        if tail:  # step s = the window shifted by s columns
            row[COL_SRC_T] = row[COL_SRC_W]
        row[COL_TILE0] = tile_start
        rows.append(row)
        tile_start += n_tiles
    sentinel = [0] * META_COLS.value
    sentinel[COL_TILE0] = tile_start  # end of the last kind
    if accepted is not None:
        _check_accepted(accepted, device, geom)
        sentinel[COL_ACCEPTED_PTR] = accepted.data_ptr()
    rows.append(sentinel)
    meta = torch.tensor(rows, dtype=torch.int64).to(device)

    ssm_numel = 0
    if ssm_dst is not None:
        check_src_dst("ssm_dst", ssm_dst, "ssm_src", ssm_src, 2)
        if not entry_is_dense(ssm_dst, 2) or not entry_is_dense(ssm_src, 3):
            raise ValueError(
                f"the SSM state dims must be dense (row-major) in both ssm_dst "
                f"({tuple(ssm_dst.stride())}) and ssm_src ({tuple(ssm_src.stride())})"
            )
        ssm_numel = math.prod(ssm_dst.shape[2:])
        ssm_int_dtype = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[ssm_dst.element_size()]
        ssm_ptrs = (ssm_src.data_ptr(), ssm_dst.data_ptr())
        ssm_args = (*ssm_src.stride()[:3], *ssm_dst.stride()[:2], ssm_numel)
    else:
        ssm_int_dtype = None
        ssm_ptrs = (meta.data_ptr(), meta.data_ptr())
        ssm_args = (0, 0, 0, 0, 0, 0)

    assert geom is not None
    n_rows_src, n_steps = geom
    if tail:
        n_steps = km1
    if n_layers > _GRID_YZ_MAX:
        raise ValueError(f"at most {_GRID_YZ_MAX} layers per launch, got {n_layers}")
    ssm_block, ssm_warps = launch_config("ssm", ssm_dst.element_size() if ssm_dst is not None else 4)
    ssm_tiles = triton.cdiv(ssm_numel, ssm_block) if ssm_numel else 0
    if ssm_track_only and tile_start == 0:  # an accept row's programs would all return before storing accepted
        raise ValueError("ssm_track_only needs conv windows with at least one element")
    fixed = (n_rows_src, n_steps, n_slots, *ssm_args, tile_start)
    constexprs = dict(
        NUM_CONV=len(conv_dsts),
        CONV_ITEMSIZE=conv_itemsize or 2,
        KM1=km1 or 1,
        CONV_BLOCK=conv_block,
        HAS_SSM=ssm_dst is not None,
        SSM_BLOCK=ssm_block,
        SSM_EVEN=ssm_numel % ssm_block == 0,
        TAIL=tail,
        ACCEPTED=accepted is not None,
        SSM_TRACK_ONLY=ssm_track_only,
        num_warps=max(ssm_warps, conv_warps),
    )
    # everything after n_acc, ready for each (track on/off, source-row table on/off)
    calls = {
        (has_track, has_src_rows): (fixed, dict(constexprs, HAS_TRACK=has_track, HAS_SRC_ROWS=has_src_rows))
        for has_track in (False, True)
        for has_src_rows in (False, True)
    }
    return CommitPlan(
        device=device,
        meta=meta,
        ssm_int_dtype=ssm_int_dtype,
        ssm_ptrs=ssm_ptrs,
        n_layers=n_layers,
        n_rows_src=n_rows_src,
        n_steps=n_steps,
        n_slots=n_slots,
        conv_tiles=tile_start,
        tiles=tile_start + ssm_tiles,
        tail=tail,
        accepted=accepted is not None,
        ssm_track_only=ssm_track_only,
        calls=calls,
    )


def _check_accepted(accepted, device, geom) -> None:
    """The accepted table: int32, 1-D, dense, on the states' device, one entry per source row at least."""
    if not isinstance(accepted, torch.Tensor):
        raise TypeError(f"accepted must be a torch.Tensor, got {type(accepted).__name__}")
    if accepted.dtype != torch.int32 or accepted.ndim != 1 or accepted.stride(0) != 1:
        raise ValueError(f"accepted must be a dense 1-D int32 tensor, got {accepted.dtype} {tuple(accepted.shape)}")
    if accepted.device != device:
        raise ValueError(f"accepted is on {accepted.device}, expected {device}")
    if geom is not None and accepted.shape[0] < geom[0]:
        raise ValueError(f"accepted has {accepted.shape[0]} entries for {geom[0]} source rows")


# ---------------------------------------------------------------- the cache

# first destination tensor (weakly, by identity: a tensor's == is elementwise) -> {layout key: plan}
_plans: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _layout(t) -> tuple | None:
    # Everything a plan reads from one tensor: data_ptr() includes the storage offset; the dtype fixes
    # the element size (memory freed and reused by a tensor of another dtype gets another plan).
    # CUDA's unified addressing gives every device and the host distinct pointers.
    return None if t is None else (t.data_ptr(), t.shape, t.stride(), t.dtype)


def _plan_key(conv_dsts, conv_srcs, ssm_dst, ssm_src, tail: bool, accepted=None, ssm_track_only=False) -> tuple:
    # Keyed on the layout of every tensor the plan describes, not on the tensor objects:
    # a tensor changed in place (transpose_, as_strided_, set_, resize_) or a new tensor
    # in reused memory gets its own plan.  A plan is a function of exactly these values,
    # so a hit is correct whichever tensors produced it.  Attribute reads only.
    return (
        tail,
        ssm_track_only,
        _layout(accepted),
        _layout(ssm_dst),
        _layout(ssm_src),
        len(conv_dsts),
        *map(_layout, conv_dsts),
        *map(_layout, conv_srcs),
    )


def get_plan(
    conv_dsts, conv_srcs, ssm_dst, ssm_src, tail: bool = False, owner=None, accepted=None, ssm_track_only: bool = False
) -> CommitPlan:
    """The cached plan of these tensors (built and validated on the first call), kept as long as ``owner`` (default:
    the first destination tensor) lives. A caller that passes temporary views names the tensor they view, so that
    the plan outlives the call (a CUDA graph that captured the launch reads its descriptor table)."""
    try:
        key = _plan_key(conv_dsts, conv_srcs, ssm_dst, ssm_src, tail, accepted, ssm_track_only)
        if owner is None:
            owner = conv_dsts[0] if conv_dsts else ssm_dst
        per_owner = _plans.get(owner)
    except (AttributeError, TypeError, IndexError):  # not tensors: build_plan says which
        return build_plan(conv_dsts, conv_srcs, ssm_dst, ssm_src, tail, accepted, ssm_track_only)
    plan = per_owner.get(key) if per_owner is not None else None
    if plan is None:
        plan = build_plan(conv_dsts, conv_srcs, ssm_dst, ssm_src, tail, accepted, ssm_track_only)
        if per_owner is None:
            per_owner = _plans.setdefault(owner, {})
        per_owner[key] = plan
        if len(per_owner) > _PLANS_PER_TENSOR:
            del per_owner[next(iter(per_owner))]  # the oldest
    return plan


def cached_plan_count() -> int:
    """How many plans the cache holds now (each goes with the tensor it is cached with)."""
    return sum(len(per_owner) for per_owner in _plans.values())


def clear_plan_cache() -> None:
    """Drop every cached plan (descriptor tables and compiled-kernel handles)."""
    _plans.clear()
