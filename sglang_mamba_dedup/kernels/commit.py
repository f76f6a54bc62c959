"""The commit kernel: every layer, every conv kind, the SSM state, the accept and
the track index sets, in one launch.  It is the package's only Triton kernel;
:func:`~.entry_points.conv_commit`, :func:`~.entry_points.ssm_commit` and
:func:`~.entry_points.tail_copy` launch it with one kind of state.

For each index set ``(steps, slots)`` and each row ``r`` with ``s = steps[r]``
and ``slot = slots[r]`` valid (see :mod:`._validate`)::

    conv_dsts[i][l, slot] = conv_srcs[i][l, r, s]    # [dim_i, K-1] window
    ssm_dst[l, slot]      = ssm_src[l, r, s]         # [*ssm_shape]

for every layer ``l``.  ``conv_srcs[i]`` may be the deduplicated overlapping
view (``view[l, r, t, d, w] == phys[l, r, d, t + w]``) or a dense buffer: the
kernel walks the view's strides.  Destinations may have any strides (views over
larger pools).  The SSM entries (trailing dims) must be dense on both sides.

Two launch options serve :func:`.tail_copy` (vLLM's DS tail copy, a window read
at step ``b``):

* a source-row table: row ``r`` reads source row ``src_rows[r]`` instead of ``r``;
* the tail mode of a plan (one conv kind, no SSM): the source is a block
  ``[.., dim, W]`` (``K-1 = W``), step ``s`` reads the window shifted by ``s``
  columns, clipped to its ``W - s`` columns inside the block (``dst[.., 0:W-s] =
  src[.., s:W]``, the tail untouched), a copy onto itself is skipped, and every
  program loads whole window rows before it stores them (memmove-safe in place).

Grid: ``(conv tiles + ssm tiles, L, rows)``; axis 0 enumerates the tiles of one
(row, layer) pair, conv kinds first.  A skipped row costs its programs two
index loads each.

Host side.  A :class:`CommitPlan` (the descriptor table and the launch
arguments) is built once per set of state tensors and cached *with the first
destination tensor* (a weak-keyed cache: the plan lives as long as that tensor,
e.g. SGLang's pool, and holds no reference to any state tensor itself; it is
keyed on every tensor's pointer, shape, strides and element size, so it is
never reused for other memory).  After the first launch of a plan variant
through Triton's ``JITFunction`` (which compiles), later launches call the
compiled kernel's launcher directly with pre-packed arguments
(:class:`~._direct_launch.DirectLaunch`): Triton's per-call binding, specialisation and cache
lookup cost more host time than the copy itself at batch 1.  The direct path
is used only where it provably launches the same compiled kernel: CUDA, no
Triton launch hooks, the index tensors' dtypes and 16-byte alignment as at the
first launch; anything else takes Triton's own path.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
import triton
import triton.language as tl
from torch.utils.weak import WeakIdKeyDictionary

from ._direct_launch import DirectLaunch
from ._validate import (
    _GRID_YZ_MAX,
    _INT32_MAX,
    check_index_pair,
    check_same_device,
    check_state_tensor,
    entry_is_dense,
    int_dtype_for,
    launch_config,
    may_overlap_itself,
)

# ---------------------------------------------------------------- descriptor table

# One int64 row of META_COLS per conv kind, then a sentinel row whose COL_TILE0 is the
# total conv tile count (the end of the last kind).  build_plan fills the rows and the
# kernel reads them through these same constants.
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
META_COLS = tl.constexpr(16)  # row length: 13 columns used, padded to 16

#: Plans kept per first-destination tensor (different sources, tail mode ...); the oldest goes first.
_PLANS_PER_TENSOR = 8

logger = logging.getLogger("sglang_mamba_dedup")


# ---------------------------------------------------------------- device code


@triton.jit
def _load_row_target(
    pid_row,
    n_acc,
    acc_steps_ptr,
    acc_slots_ptr,
    trk_steps_ptr,
    trk_slots_ptr,
    src_rows_ptr,
    n_src_rows,
    n_steps,
    n_slots,
    HAS_TRACK: tl.constexpr,
    HAS_SRC_ROWS: tl.constexpr,
):
    """Map a grid row (accept rows first, then track rows) to
    (source row, step, destination slot, valid), all int64."""
    if HAS_TRACK:
        is_trk = pid_row >= n_acc
        is_acc = pid_row < n_acc
        r = tl.where(is_trk, pid_row - n_acc, pid_row).to(tl.int64)
        s_a = tl.load(acc_steps_ptr + r, mask=is_acc, other=-1).to(tl.int64)
        s_t = tl.load(trk_steps_ptr + r, mask=is_trk, other=-1).to(tl.int64)
        d_a = tl.load(acc_slots_ptr + r, mask=is_acc, other=-1).to(tl.int64)
        d_t = tl.load(trk_slots_ptr + r, mask=is_trk, other=-1).to(tl.int64)
        step = tl.where(is_trk, s_t, s_a)
        slot = tl.where(is_trk, d_t, d_a)
    else:
        r = pid_row.to(tl.int64)
        step = tl.load(acc_steps_ptr + r).to(tl.int64)
        slot = tl.load(acc_slots_ptr + r).to(tl.int64)
    valid = (step >= 0) & (step < n_steps) & (slot >= 0) & (slot < n_slots)
    if HAS_SRC_ROWS:
        r = tl.load(src_rows_ptr + r).to(tl.int64)
        valid = valid & (r >= 0) & (r < n_src_rows)
    return r, step, slot, valid


@triton.jit
def _copy_window_tile(
    src_ptr,
    dst_ptr,
    src_base,
    dst_base,
    tile,
    dim,
    s_d,
    s_w,
    d_d,
    d_w,
    KM1: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Copy elements [tile*BLOCK, (tile+1)*BLOCK) of one [dim, K-1] window,
    flattened row-major, through explicit (dim, window) strides on both sides."""
    e = tile * BLOCK + tl.arange(0, BLOCK)
    mask = e < dim * KM1
    d = (e // KM1).to(tl.int64)
    w = (e % KM1).to(tl.int64)
    vals = tl.load(src_ptr + (src_base + d * s_d + w * s_w), mask=mask)
    tl.store(dst_ptr + (dst_base + d * d_d + w * d_w), vals, mask=mask)


@triton.jit
def _copy_window_rows(
    src_ptr,
    dst_ptr,
    src_base,
    dst_base,
    tile,
    dim,
    s_d,
    s_w,
    d_d,
    d_w,
    n_cols,
    KM1: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Copy columns [0, n_cols) of the window rows [tile*ROWS, (tile+1)*ROWS), ROWS = BLOCK // KM1:
    each row whole in this one program, every load before any store, so an in-place shift (the
    source a few columns ahead of the destination, same memory) reads nothing already overwritten.
    Row indices in int64 (no 2**31 limit on dim * (K-1))."""
    ROWS: tl.constexpr = BLOCK // KM1
    e = tl.arange(0, BLOCK)
    d = tile.to(tl.int64) * ROWS + (e // KM1).to(tl.int64)
    w = (e % KM1).to(tl.int64)
    mask = (e < ROWS * KM1) & (d < dim) & (w < n_cols)
    vals = tl.load(src_ptr + (src_base + d * s_d + w * s_w), mask=mask)
    tl.debug_barrier()
    tl.store(dst_ptr + (dst_base + d * d_d + w * d_w), vals, mask=mask)


@triton.jit
def _copy_flat_tile(src_ptr, dst_ptr, src_base, dst_base, tile, numel, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    """Copy elements [tile*BLOCK, (tile+1)*BLOCK) of one dense entry of ``numel`` elements."""
    e = tile * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        vals = tl.load(src_ptr + src_base + e)
        tl.store(dst_ptr + dst_base + e, vals)
    else:
        mask = e < numel
        vals = tl.load(src_ptr + src_base + e, mask=mask)
        tl.store(dst_ptr + dst_base + e, vals, mask=mask)


@triton.jit(do_not_specialize=["n_acc"])
def _fused_commit_kernel(
    conv_meta_ptr,
    ssm_src_ptr,
    ssm_dst_ptr,
    acc_steps_ptr,
    acc_slots_ptr,
    trk_steps_ptr,
    trk_slots_ptr,
    src_rows_ptr,
    n_acc,
    n_src_rows,
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
    HAS_SRC_ROWS: tl.constexpr,
    TAIL: tl.constexpr,
):
    tile = tl.program_id(0)
    layer = tl.program_id(1).to(tl.int64)
    pid_row = tl.program_id(2)
    r, step, slot, valid = _load_row_target(
        pid_row,
        n_acc,
        acc_steps_ptr,
        acc_slots_ptr,
        trk_steps_ptr,
        trk_slots_ptr,
        src_rows_ptr,
        n_src_rows,
        n_steps,
        n_slots,
        HAS_TRACK,
        HAS_SRC_ROWS,
    )
    if valid:
        if tile < conv_tiles:
            for k in tl.static_range(NUM_CONV):
                row = conv_meta_ptr + k * META_COLS
                t0 = tl.load(row + COL_TILE0)
                t1 = tl.load(row + META_COLS + COL_TILE0)  # the next kind's (or the sentinel's) first tile
                if (tile >= t0) & (tile < t1):
                    src_addr = tl.load(row + COL_SRC_PTR)
                    dst_addr = tl.load(row + COL_DST_PTR)
                    if CONV_ITEMSIZE == 2:
                        src = src_addr.to(tl.pointer_type(tl.int16))
                        dst = dst_addr.to(tl.pointer_type(tl.int16))
                    else:
                        src = src_addr.to(tl.pointer_type(tl.int32))
                        dst = dst_addr.to(tl.pointer_type(tl.int32))
                    dim = tl.load(row + COL_DIM)
                    src_base = (
                        layer * tl.load(row + COL_SRC_L)
                        + r * tl.load(row + COL_SRC_R)
                        + step * tl.load(row + COL_SRC_T)
                    )
                    dst_base = layer * tl.load(row + COL_DST_L) + slot * tl.load(row + COL_DST_S)
                    s_d = tl.load(row + COL_SRC_D)
                    s_w = tl.load(row + COL_SRC_W)
                    d_d = tl.load(row + COL_DST_D)
                    d_w = tl.load(row + COL_DST_W)
                    if TAIL:
                        # A copy onto itself (offset 0 from a block onto itself) moves nothing: skipped.
                        moves = (
                            (src_addr + src_base * CONV_ITEMSIZE != dst_addr + dst_base * CONV_ITEMSIZE)
                            | (s_d != d_d)
                            | (s_w != d_w)
                        )
                        if moves:
                            _copy_window_rows(
                                src,
                                dst,
                                src_base,
                                dst_base,
                                tile - t0,
                                dim,
                                s_d,
                                s_w,
                                d_d,
                                d_w,
                                KM1 - step,
                                KM1,
                                CONV_BLOCK,
                            )
                    else:
                        _copy_window_tile(
                            src, dst, src_base, dst_base, tile - t0, dim, s_d, s_w, d_d, d_w, KM1, CONV_BLOCK
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


# ---------------------------------------------------------------- plans


@dataclass(eq=False)
class CommitPlan:
    """What one launch needs for a given set of state tensors: built once by :func:`build_plan`,
    cached by :func:`get_plan`, launched by :func:`launch_plan`.  It holds no reference to the
    state tensors (their pointers are plain integers here and in ``meta``)."""

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
    tail: bool  # tail mode (see the module docstring)
    # (has track set, has source-row table) -> (kernel arguments after n_acc, constexprs and num_warps)
    calls: dict[tuple[bool, bool], tuple[tuple[Any, ...], dict[str, Any]]]
    # the same key -> the direct launcher of the compiled kernel (None: Triton's path only)
    direct: dict[tuple[bool, bool], DirectLaunch | None] = field(default_factory=dict)


# first destination tensor (weakly, by identity: a tensor's == is elementwise) -> {layout key: plan}
_plans: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _layout(t) -> tuple | None:
    # Everything a plan reads from one tensor: data_ptr() includes the storage offset; the dtype fixes
    # the element size (memory freed and reused by a tensor of another dtype gets another plan).
    # CUDA's unified addressing gives every device and the host distinct pointers.
    return None if t is None else (t.data_ptr(), t.shape, t.stride(), t.dtype)


def _plan_key(conv_dsts, conv_srcs, ssm_dst, ssm_src, tail: bool) -> tuple:
    # Keyed on the layout of every tensor the plan describes, not on the tensor objects:
    # a tensor changed in place (transpose_, as_strided_, set_, resize_) or a new tensor
    # in reused memory gets its own plan.  A plan is a function of exactly these values,
    # so a hit is correct whichever tensors produced it.  Attribute reads only.
    return (
        tail,
        _layout(ssm_dst),
        _layout(ssm_src),
        len(conv_dsts),
        *map(_layout, conv_dsts),
        *map(_layout, conv_srcs),
    )


def build_plan(conv_dsts, conv_srcs, ssm_dst, ssm_src, fn_name: str = "fused_commit", tail: bool = False) -> CommitPlan:
    """Validate the state tensors and pack their pointers and strides once.

    ``tail``: the tail mode (one conv pair, no SSM): ``conv_srcs[0]`` is ``[L, R, 1, dim, W]``
    (blocks, one step) and ``conv_dsts[0]`` ``[L, slots, dim, W]``; steps run over ``[0, W)``
    and step ``s`` reads columns ``s..W-1`` of the source block into columns ``0..W-1-s``.
    """
    conv_dsts = list(conv_dsts)
    conv_srcs = list(conv_srcs)
    if len(conv_dsts) != len(conv_srcs):
        raise ValueError(f"{fn_name}: {len(conv_dsts)} conv_dsts but {len(conv_srcs)} conv_srcs")
    if (ssm_dst is None) != (ssm_src is None):
        raise ValueError(f"{fn_name}: ssm_dst and ssm_src must both be given or both be None")
    if not conv_dsts and ssm_dst is None:
        raise ValueError(f"{fn_name}: nothing to commit (no conv pairs and no SSM pair)")
    if tail and (len(conv_dsts) != 1 or ssm_dst is not None):
        raise ValueError(f"{fn_name}: the tail mode takes one conv pair and no SSM pair")

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
            raise ValueError(
                f"{fn_name}: {sname} must have one more dim (the step) than {dname}: "
                f"{tuple(src.shape)} vs {tuple(dst.shape)}"
            )
        if dst.dtype != src.dtype:
            raise TypeError(f"{fn_name}: {dname} is {dst.dtype} but {sname} is {src.dtype}")
        if may_overlap_itself(dst):  # two rows to "different" slots would write the same memory (a race)
            raise ValueError(f"{fn_name}: {dname} overlaps itself (shape {tuple(dst.shape)}, strides {dst.stride()})")
        if dst.shape[0] != n_layers or src.shape[0] != n_layers:
            raise ValueError(
                f"{fn_name}: layer count mismatch: {dname} {tuple(dst.shape)}, {sname} "
                f"{tuple(src.shape)}, expected {n_layers} layers"
            )
        if dst.shape[1] != n_slots:
            raise ValueError(
                f"{fn_name}: {dname} has {dst.shape[1]} slots, expected {n_slots} like the first destination"
            )
        if tuple(dst.shape[2:]) != tuple(src.shape[3:]):
            raise ValueError(
                f"{fn_name}: state shape mismatch: {dname} {tuple(dst.shape)} vs {sname} {tuple(src.shape)}"
            )
        if geom is None:
            geom = (src.shape[1], src.shape[2])
        elif geom != (src.shape[1], src.shape[2]):
            raise ValueError(f"{fn_name}: {sname} has rows/steps {tuple(src.shape[1:3])}, expected {geom}")
        if not tail and dst.numel() and dst[0, 0].numel() > _INT32_MAX:
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
            raise ValueError(
                f"{fn_name}: all conv kinds must share K-1; conv_dsts[{i}] has {dst.shape[3]}, expected {km1}"
            )
        if dst.element_size() != conv_itemsize:
            raise TypeError(f"{fn_name}: all conv kinds must share one element size; conv_dsts[{i}] is {dst.dtype}")
        dim = dst.shape[2]
        if tail:  # whole window rows per tile: at least one row
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
    rows.append(sentinel)
    meta = torch.tensor(rows, dtype=torch.int64).to(device)

    ssm_numel = 0
    if ssm_dst is not None:
        check_src_dst("ssm_dst", ssm_dst, "ssm_src", ssm_src, 2)
        if not entry_is_dense(ssm_dst, 2) or not entry_is_dense(ssm_src, 3):
            raise ValueError(
                f"{fn_name}: the SSM state dims must be dense (row-major) in both ssm_dst "
                f"({tuple(ssm_dst.stride())}) and ssm_src ({tuple(ssm_src.stride())})"
            )
        ssm_numel = 1
        for n in ssm_dst.shape[2:]:
            ssm_numel *= n
        ssm_int_dtype = int_dtype_for(ssm_dst.element_size())
        ssm_ptrs = (ssm_src.data_ptr(), ssm_dst.data_ptr())
        ssm_args = (
            ssm_src.stride(0),
            ssm_src.stride(1),
            ssm_src.stride(2),
            ssm_dst.stride(0),
            ssm_dst.stride(1),
            ssm_numel,
        )
    else:
        ssm_int_dtype = None
        ssm_ptrs = (meta.data_ptr(), meta.data_ptr())
        ssm_args = (0, 0, 0, 0, 0, 0)

    assert geom is not None
    n_rows_src, n_steps = geom
    if tail:
        n_steps = km1
    if n_layers > _GRID_YZ_MAX:
        raise ValueError(f"{fn_name}: at most {_GRID_YZ_MAX} layers per launch, got {n_layers}")
    ssm_block, ssm_warps = launch_config("ssm", ssm_dst.element_size() if ssm_dst is not None else 4)
    ssm_tiles = triton.cdiv(ssm_numel, ssm_block) if ssm_numel else 0
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
        calls=calls,
    )


def get_plan(
    conv_dsts, conv_srcs, ssm_dst, ssm_src, fn_name: str = "fused_commit", tail: bool = False, owner=None
) -> CommitPlan:
    """The cached plan of these tensors (built on the first call).  Cached with ``owner`` (default: the
    first destination tensor), weakly: it goes when that tensor goes.  A caller that passes temporary
    views names the tensor they view as the owner, so the plan outlives the call (a CUDA graph that
    captured the launch reads its descriptor table)."""
    try:
        key = _plan_key(conv_dsts, conv_srcs, ssm_dst, ssm_src, tail)
        if owner is None:
            owner = conv_dsts[0] if conv_dsts else ssm_dst
        per_owner = _plans.get(owner)
    except (AttributeError, TypeError, IndexError):  # not tensors: build_plan says which
        return build_plan(conv_dsts, conv_srcs, ssm_dst, ssm_src, fn_name, tail)
    plan = per_owner.get(key) if per_owner is not None else None
    if plan is None:
        plan = build_plan(conv_dsts, conv_srcs, ssm_dst, ssm_src, fn_name, tail)
        if per_owner is None:
            per_owner = _plans.setdefault(owner, {})
        per_owner[key] = plan
        if len(per_owner) > _PLANS_PER_TENSOR:
            del per_owner[next(iter(per_owner))]  # the oldest
    return plan


def clear_plan_cache() -> None:
    """Drop every cached plan (descriptor tables and compiled-kernel handles)."""
    _plans.clear()


#: False under TRITON_INTERPRET (the kernel is interpreted on the host: no compiled launcher).
_CAN_LAUNCH_DIRECTLY = isinstance(_fused_commit_kernel, triton.runtime.jit.JITFunction)

#: Launches in this process by path (Python integer increments): ``direct`` through :class:`DirectLaunch`,
#: ``triton`` through Triton's own launch. The GPU recipe checks that ``direct`` grew.
LAUNCHES = {"direct": 0, "triton": 0}


def launch_plan(
    plan: CommitPlan,
    ssm_src,
    ssm_dst,
    accept_steps,
    accept_slots,
    track_steps,
    track_slots,
    fn_name: str,
    src_rows=None,
) -> None:
    """Validate the index sets and launch.  ``ssm_src``/``ssm_dst``: the SSM pair the plan was built
    for (None when it has none).  ``src_rows`` (the source-row table, 1-D int32/int64 on the plan's
    device, contiguous, at least as long as each index set; checked by the caller) lifts the "no more
    rows than the source has" limit, since rows no longer name source rows."""
    max_rows = plan.n_rows_src if src_rows is None else _INT32_MAX
    n_acc = check_index_pair("accept_steps", accept_steps, "accept_slots", accept_slots, plan.device, max_rows)
    has_track = track_steps is not None or track_slots is not None
    if has_track:
        if track_steps is None or track_slots is None:
            raise ValueError(f"{fn_name}: track_steps and track_slots must both be given or both be None")
        n_trk = check_index_pair("track_steps", track_steps, "track_slots", track_slots, plan.device, max_rows)
    else:
        n_trk = 0
        track_steps, track_slots = accept_steps, accept_slots
    n_rows = n_acc + n_trk
    if n_rows == 0 or plan.tiles == 0 or plan.n_layers == 0:
        return
    if n_rows > _GRID_YZ_MAX:
        raise ValueError(f"{fn_name}: at most {_GRID_YZ_MAX} rows (accept + track) per launch, got {n_rows}")
    variant = (n_trk > 0, src_rows is not None)
    if src_rows is None:
        src_rows = accept_steps  # not read
    elif src_rows.shape[0] < max(n_acc, n_trk):
        raise ValueError(f"{fn_name}: {src_rows.shape[0]} source rows for {max(n_acc, n_trk)} index rows")
    grid = (plan.tiles, plan.n_layers, n_rows)
    index = (accept_steps, accept_slots, track_steps, track_slots, src_rows)
    direct = plan.direct.get(variant)
    if direct is not None and direct.launch(grid, index, n_acc, _fused_commit_kernel):
        LAUNCHES["direct"] += 1
        return
    LAUNCHES["triton"] += 1
    fixed, kw = plan.calls[variant]
    if plan.ssm_int_dtype is not None:
        ssm = (ssm_src.view(plan.ssm_int_dtype), ssm_dst.view(plan.ssm_int_dtype))
    else:
        ssm = (plan.meta, plan.meta)  # not read
    args = (plan.meta, *ssm, *index, n_acc, *fixed)
    compiled = _fused_commit_kernel[grid](*args, **kw)
    if variant not in plan.direct and _CAN_LAUNCH_DIRECTLY and plan.device.type == "cuda" and compiled is not None:
        plan.direct[variant] = DirectLaunch.build(_fused_commit_kernel, compiled, args, kw, len(index))


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
    destination slots: see :mod:`sglang_mamba_dedup.kernels._validate`.
    """
    if not isinstance(conv_dsts, (list, tuple)):
        conv_dsts = list(conv_dsts)
    if not isinstance(conv_srcs, (list, tuple)):
        conv_srcs = list(conv_srcs)
    plan = get_plan(conv_dsts, conv_srcs, ssm_dst, ssm_src, "fused_commit")
    launch_plan(plan, ssm_src, ssm_dst, accept_steps, accept_slots, track_steps, track_slots, "fused_commit")
