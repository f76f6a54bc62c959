"""The commit kernel and its launch (the package's other Triton kernel, :mod:`.seed_index`, builds the zero-copy
verify's index tables). For each index set ``(steps, slots)``, each valid row ``r`` (:mod:`sglang_mamba_dedup.kernels`)
and every layer ``l``, with ``s = steps[r]``::

    conv_dsts[i][l, slots[r]] = conv_srcs[i][l, r, s]    # [dim, K-1] window
    ssm_dst[l, slots[r]]      = ssm_src[l, r, s]         # [*ssm_shape]

``conv_srcs[i]`` may be the deduplicated overlapping view (``view[l, r, t, d, w] == phys[l, r, d, t + w]``) or a
dense buffer: the kernel walks the view's strides. Destinations may have any strides (views over larger pools);
the SSM entries (trailing dims) must be dense on both sides. A source-row table makes row ``r`` read source row
``src_rows[r]`` (one table for both index sets: track row ``r`` reads ``src_rows[r]`` too).

The zero-copy commit (docs/zero-copy.md §2, §12.3) is two plan options:

* ``accepted`` (a table): each valid accept row also stores ``accepted[r'] = s + 1``, ``r'`` its source row; a track
  row never stores into it (the next verify would seed from the track step);
* ``ssm_track_only``: accept rows copy their conv windows only, track rows their conv windows and the SSM state (an
  accept row's SSM programs return before any load; a track row's conv programs always run).

With both and ``src_rows = req_pool_indices`` this is the zero-copy commit with the radix cache on: the accept rows
roll the conv windows and set ``accepted``, the track rows copy step ``steps_to_track`` of the requests' scratch rows
into the track slots, in one launch. For :func:`.single_kind.tail_copy`: a plan's tail mode (one conv kind, no SSM):
step ``s`` reads the ``[.., dim, W]`` block shifted by ``s`` columns (``dst[.., 0:W-s] = src[.., s:W]``), a copy onto
itself is skipped, and every program loads whole window rows before it stores them (memmove-safe in place).

Grid: ``(conv tiles + ssm tiles, L, rows)``; axis 0 enumerates the tiles of one (row, layer) pair, conv kinds
first (an ``ssm_track_only`` launch without a track set: the conv tiles only); a skipped row costs its programs two
index loads each. After the first launch of a plan variant through Triton (which compiles), later ones take
:class:`~._direct_launch.DirectLaunch` where it provably launches the same compiled kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._direct_launch import DirectLaunch
from ._validate import _GRID_YZ_MAX, _INT32_MAX, check_index, check_index_pair
from .descriptor import (
    COL_ACCEPTED_PTR,
    COL_DIM,
    COL_DST_D,
    COL_DST_L,
    COL_DST_PTR,
    COL_DST_S,
    COL_DST_W,
    COL_SRC_D,
    COL_SRC_L,
    COL_SRC_PTR,
    COL_SRC_R,
    COL_SRC_T,
    COL_SRC_W,
    COL_TILE0,
    META_COLS,
    CommitPlan,
    get_plan,
)

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
    src_ptr, dst_ptr, src_base, dst_base, tile, dim, s_d, s_w, d_d, d_w, KM1: tl.constexpr, BLOCK: tl.constexpr
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
    src_ptr, dst_ptr, src_base, dst_base, tile, dim, s_d, s_w, d_d, d_w, n_cols, KM1: tl.constexpr, BLOCK: tl.constexpr
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
    ACCEPTED: tl.constexpr,
    SSM_TRACK_ONLY: tl.constexpr,
):
    tile = tl.program_id(0)
    layer = tl.program_id(1).to(tl.int64)
    pid_row = tl.program_id(2)
    if SSM_TRACK_ONLY:  # noqa: SIM102 - a constexpr branch (pruned at compile time) around a runtime one
        if (tile >= conv_tiles) & (pid_row < n_acc):  # an accept row's SSM tile: nothing to do, nothing loaded
            return
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
        # the zero-copy bookkeeping: one store per valid accept row, from its first program; never a track row's
        if ACCEPTED:  # noqa: SIM102 - a constexpr branch (pruned at compile time) around a runtime one
            if (tile == 0) & (layer == 0) & (pid_row < n_acc):
                table = tl.load(conv_meta_ptr + NUM_CONV * META_COLS + COL_ACCEPTED_PTR).to(tl.pointer_type(tl.int32))
                tl.store(table + r, (step + 1).to(tl.int32))
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
        elif HAS_SSM:
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


# ---------------------------------------------------------------- launch

#: False under TRITON_INTERPRET (the kernel is interpreted on the host: no compiled launcher).
_CAN_LAUNCH_DIRECTLY = isinstance(_fused_commit_kernel, triton.runtime.jit.JITFunction)


def launch(plan: CommitPlan, *, accept, track=None, ssm=None, src_rows=None) -> str | None:
    """Check the index sets and launch ``plan`` (no host synchronisation). ``accept`` / ``track``: ``(steps,
    slots)`` (``track`` None or ``(None, None)``: none); ``ssm``: the plan's ``(src, dst)`` SSM pair, if any;
    ``src_rows``: the source-row table, one entry per index row of the longer set, read by both sets (rows then no
    longer name source rows: no limit by the source's rows). Returns the path taken, for the caller to count:
    ``"direct"`` (:class:`DirectLaunch`), ``"triton"`` (Triton's own launch) or None (nothing to launch).

    The zero-copy commit with a track set (docs/zero-copy.md §12.3), on a plan built with
    ``get_plan(conv, conv_scratch, temporal, ssm_scratch, accepted=table, ssm_track_only=True)``::

        launch(plan, ssm=(ssm_scratch, temporal), accept=(last_correct, slots),
               track=(steps_to_track, track_slots), src_rows=req_pool_indices)
    """
    _check_ssm_pair(plan, ssm)
    try:
        accept_steps, accept_slots = accept
    except (TypeError, ValueError):
        raise ValueError(f"accept must be a (steps, slots) pair, got {type(accept).__name__}") from None
    max_rows = plan.n_rows_src if src_rows is None else _INT32_MAX
    n_acc = check_index_pair("accept_steps", accept_steps, "accept_slots", accept_slots, plan.device, max_rows)
    try:
        track_steps, track_slots = (None, None) if track is None else track
    except (TypeError, ValueError):
        raise ValueError(f"track must be a (steps, slots) pair or None, got {type(track).__name__}") from None
    if track_steps is None and track_slots is None:
        n_trk = 0
        track_steps, track_slots = accept_steps, accept_slots  # not read
    elif track_steps is None or track_slots is None:
        raise ValueError("track_steps and track_slots must both be given or both be None")
    else:
        n_trk = check_index_pair("track_steps", track_steps, "track_slots", track_slots, plan.device, max_rows)
        if plan.accepted and plan.ssm_int_dtype is None:  # the natural bug of "drop the SSM accept pair" (HR2)
            raise ValueError(
                "a track set on a zero-copy plan without the SSM pair would leave the track slots' SSM states "
                "stale: build the plan with the SSM pair and ssm_track_only=True"
            )
    if src_rows is not None:
        check_index("src_rows", src_rows, plan.device)
        if src_rows.shape[0] != max(n_acc, n_trk):
            raise ValueError(f"{src_rows.shape[0]} source rows (src_rows) for {max(n_acc, n_trk)} index rows")
    n_rows = n_acc + n_trk
    if n_rows == 0 or plan.tiles == 0 or plan.n_layers == 0:
        return None
    if n_rows > _GRID_YZ_MAX:
        raise ValueError(f"at most {_GRID_YZ_MAX} rows (accept + track) per launch, got {n_rows}")
    variant = (n_trk > 0, src_rows is not None)
    if src_rows is None:
        src_rows = accept_steps  # not read
    # an SSM-track-only launch without track rows: its SSM programs would all return at once
    grid = (plan.conv_tiles if plan.ssm_track_only and n_trk == 0 else plan.tiles, plan.n_layers, n_rows)
    index = (accept_steps, accept_slots, track_steps, track_slots, src_rows)
    direct = plan.direct.get(variant)
    if direct is not None and direct.launch(grid, index, n_acc, _fused_commit_kernel):
        return "direct"
    fixed, kw = plan.calls[variant]
    # the SSM pair as integers of its width (bitwise copies); the table again where there is none (not read)
    typed = tuple(t.view(plan.ssm_int_dtype) for t in ssm) if plan.ssm_int_dtype is not None else (plan.meta,) * 2
    args = (plan.meta, *typed, *index, n_acc, *fixed)
    compiled = _fused_commit_kernel[grid](*args, **kw)
    if variant not in plan.direct and _CAN_LAUNCH_DIRECTLY and plan.device.type == "cuda" and compiled is not None:
        plan.direct[variant] = DirectLaunch.build(_fused_commit_kernel, compiled, args, kw, len(index))
    return "triton"


def _check_ssm_pair(plan: CommitPlan, ssm) -> None:
    """``ssm`` must be the plan's own ``(src, dst)`` pair (the kernel walks the plan's strides over these tensors; the
    direct launch uses the plan's addresses): two address reads on the host, no device work."""
    if plan.ssm_int_dtype is None:
        if ssm is not None and any(t is not None for t in ssm):
            raise ValueError("ssm was given, but this plan has no SSM pair (build the plan with it)")
        return
    try:
        src, dst = ssm
        same = (src.data_ptr(), dst.data_ptr()) == plan.ssm_ptrs
    except (TypeError, ValueError, AttributeError):
        same = False
    if not same:
        raise ValueError("ssm must be the plan's SSM pair (src, dst), the tensors the plan was built with")


def fused_commit(
    *, conv_dsts, conv_srcs, ssm_dst, ssm_src, accept_steps, accept_slots, track_steps=None, track_slots=None
) -> str | None:
    """Commit the accepted (and tracked) draft step of every request: all layers, all conv kinds and the SSM
    state, in one launch, without host synchronisation. conv_dsts[i]: ``[L, slots+1, dim_i, K-1]``; conv_srcs[i]: ``[L, R, D, dim_i, K-1]`` (dedup view or dense);
    any strides. ssm_dst: ``[L, slots+1, *ssm_shape]``, ssm_src: ``[L, R, D, *ssm_shape]`` (both None: no SSM
    pair; the ``*ssm_shape`` dims dense). accept_steps / accept_slots: ``[B]`` int32 or int64 on the states'
    device, ``B <= R``; track_steps / track_slots: an optional second index set, same launch. Index semantics,
    CUDA graphs and duplicated slots: :mod:`sglang_mamba_dedup.kernels`. Returns the launch path (:func:`launch`).
    """
    conv_dsts, conv_srcs = list(conv_dsts), list(conv_srcs)
    plan = get_plan(conv_dsts, conv_srcs, ssm_dst, ssm_src)
    return launch(plan, ssm=(ssm_src, ssm_dst), accept=(accept_steps, accept_slots), track=(track_steps, track_slots))
