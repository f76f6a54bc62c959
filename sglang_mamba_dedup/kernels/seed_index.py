"""The zero-copy verify's index tables, in one launch per verify forward (docs/zero-copy.md §2.1, §2.3).

For each batch entry ``n`` (``slots[n] < 0``: a padding entry)::

    rows[n]  = req_pool_indices[n]                          if slots[n] >= 0 else 0   (row 0: the discard row)
    seeds[n] = rows[n] * pitch + accepted[rows[n]] - 1      if slots[n] >= 0 else -1  (-1: a zero initial state)

``rows`` is int32 (the scratch rows the verify writes), ``seeds`` has the dtype of ``slots`` (an index into the
scratch viewed ``[rows * pitch, *state]``: where the request's live state is). Every layer of the forward reuses
both. Computed on the device with no host synchronisation, so a CUDA graph that captures the launch recomputes
them at every replay. Reference: ``tests/support/reference.py`` (``seeded_rows_reference``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK = 128


@triton.jit
def _seeded_rows_kernel(rpi_ptr, slots_ptr, accepted_ptr, rows_ptr, seeds_ptr, n, n_rows, pitch, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = i < n
    slot = tl.load(slots_ptr + i, mask=inside, other=-1)
    valid = inside & (slot >= 0)
    row = tl.load(rpi_ptr + i, mask=valid, other=0).to(tl.int64)
    valid = valid & (row >= 0) & (row < n_rows)  # a row outside the table: treated as padding, never read
    row = tl.where(valid, row, 0)
    acc = tl.load(accepted_ptr + row, mask=valid, other=1).to(tl.int64)
    seed = tl.where(valid, row * pitch + acc - 1, -1)
    tl.store(rows_ptr + i, row.to(tl.int32), mask=inside)
    tl.store(seeds_ptr + i, seed.to(seeds_ptr.dtype.element_ty), mask=inside)


def seeded_rows(
    req_pool_indices: torch.Tensor, slots: torch.Tensor, accepted: torch.Tensor, pitch: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, seeds)`` of the module docstring for the first ``slots.shape[0]`` entries (``req_pool_indices`` may
    be longer: a CUDA graph's padded buffer). ``accepted``: the int32 table, one entry per scratch row."""
    n = slots.shape[0]
    if req_pool_indices.shape[0] < n:
        raise ValueError(f"{req_pool_indices.shape[0]} req_pool_indices for {n} slots")
    if accepted.dtype != torch.int32 or accepted.ndim != 1:
        raise ValueError(f"accepted must be a 1-D int32 tensor, got {accepted.dtype} {tuple(accepted.shape)}")
    rows = torch.empty(n, dtype=torch.int32, device=slots.device)
    seeds = torch.empty(n, dtype=slots.dtype, device=slots.device)
    if n:
        _seeded_rows_kernel[(triton.cdiv(n, _BLOCK),)](
            req_pool_indices,
            slots,
            accepted,
            rows,
            seeds,
            n,
            accepted.shape[0],
            pitch,
            BLOCK=_BLOCK,
        )
    return rows, seeds
