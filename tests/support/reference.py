"""Plain-PyTorch references for the commit kernels: explicit loops and
indexing, independent of the Triton code.  They mutate ``dst`` in place, apply
the accept set then the track set, rows in order (so for duplicated
destinations the last valid row wins here; the kernels only promise that each
element comes from one of the contending rows).
"""

from __future__ import annotations

import torch


def _rows(steps, slots, n_steps, n_slots):
    for r, (s, slot) in enumerate(zip(steps.tolist(), slots.tolist())):
        if 0 <= s < n_steps and 0 <= slot < n_slots:
            yield r, s, slot


def commit_reference(dst: torch.Tensor, src: torch.Tensor, steps, slots) -> None:
    """``dst[l, slot] = src[l, r, s]`` for each valid row (one state kind)."""
    n_steps, n_slots = src.shape[2], dst.shape[1]
    for r, s, slot in _rows(steps, slots, n_steps, n_slots):
        for layer in range(dst.shape[0]):
            dst[layer, slot].copy_(src[layer, r, s])


def fused_commit_reference(
    *, conv_dsts, conv_srcs, ssm_dst, ssm_src, accept_steps, accept_slots, track_steps=None, track_slots=None
) -> None:
    sets = [(accept_steps, accept_slots)]
    if track_steps is not None:
        sets.append((track_steps, track_slots))
    for steps, slots in sets:
        for dst, src in zip(conv_dsts, conv_srcs):
            commit_reference(dst, src, steps, slots)
        if ssm_dst is not None:
            commit_reference(ssm_dst, ssm_src, steps, slots)


def zero_copy_commit_reference(
    *,
    conv_dsts,
    conv_srcs,
    ssm_dst,
    ssm_src,
    accepted,
    src_rows,
    accept_steps,
    accept_slots,
    track_steps=None,
    track_slots=None,
) -> None:
    """The zero-copy commit with a track set (docs/zero-copy.md §12.3), one row at a time. Index row ``r`` of either
    set reads source row ``src_rows[r]``; a row is valid when its step is in ``[0, D)``, its slot in ``[0, slots)``
    and its source row in ``[0, R)``. A valid accept row copies its conv windows only and sets ``accepted[source
    row] = step + 1``; a valid track row copies its conv windows and the SSM state, and never touches
    ``accepted``."""
    n_rows, n_steps, n_slots = ssm_src.shape[1], ssm_src.shape[2], ssm_dst.shape[1]
    rows = src_rows.tolist()

    def valid(steps, slots):
        for r, (s, slot) in enumerate(zip(steps.tolist(), slots.tolist())):
            if 0 <= s < n_steps and 0 <= slot < n_slots and 0 <= rows[r] < n_rows:
                yield rows[r], s, slot

    for row, s, slot in valid(accept_steps, accept_slots):
        for dst, src in zip(conv_dsts, conv_srcs):
            dst[:, slot] = src[:, row, s]
        accepted[row] = s + 1
    if track_steps is not None:
        for row, s, slot in valid(track_steps, track_slots):
            for dst, src in zip(conv_dsts, conv_srcs):
                dst[:, slot] = src[:, row, s]
            ssm_dst[:, slot] = ssm_src[:, row, s]


def conv_commit_reference(*, conv_dst, conv_src, accept_steps, accept_slots, track_steps=None, track_slots=None):
    fused_commit_reference(
        conv_dsts=[conv_dst],
        conv_srcs=[conv_src],
        ssm_dst=None,
        ssm_src=None,
        accept_steps=accept_steps,
        accept_slots=accept_slots,
        track_steps=track_steps,
        track_slots=track_slots,
    )


def ssm_commit_reference(*, ssm_dst, ssm_src, accept_steps, accept_slots, track_steps=None, track_slots=None):
    fused_commit_reference(
        conv_dsts=[],
        conv_srcs=[],
        ssm_dst=ssm_dst,
        ssm_src=ssm_src,
        accept_steps=accept_steps,
        accept_slots=accept_slots,
        track_steps=track_steps,
        track_slots=track_slots,
    )


def tail_copy_reference(src, dst, src_blocks, dst_blocks, offsets) -> None:
    """``dst[db, d, 0:W-b] = src[sb, d, b:W]`` per request, one element at a time,
    low to high (memmove-safe for an in-place left shift)."""
    n_src, _, W = src.shape
    n_dst = dst.shape[0]
    for sb, db, b in zip(src_blocks.tolist(), dst_blocks.tolist(), offsets.tolist()):
        if not (0 <= sb < n_src and 0 <= db < n_dst and 0 <= b <= W):
            continue
        for j in range(W - b):
            dst[db, :, j] = src[sb, :, j + b]


def seeded_rows_reference(req_pool_indices, slots, accepted, pitch):
    """The zero-copy verify's ``(rows, seeds)``, one entry at a time (``kernels.seed_index``)."""
    rows, seeds = [], []
    for n, slot in enumerate(slots.tolist()):
        row = int(req_pool_indices[n])
        if slot >= 0 and 0 <= row < accepted.shape[0]:
            rows.append(row)
            seeds.append(row * pitch + int(accepted[row]) - 1)
        else:
            rows.append(0)
            seeds.append(-1)
    return (
        torch.tensor(rows, dtype=torch.int32, device=slots.device),
        torch.tensor(seeds, dtype=slots.dtype, device=slots.device),
    )
