"""Launch configuration and argument checks of the commit kernel (:mod:`.state_commit`); the index semantics
they serve are the package's contract (:mod:`sglang_mamba_dedup.kernels`)."""

from __future__ import annotations

import torch
import triton

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)
_INT32_MAX = 2**31 - 1
_GRID_YZ_MAX = 65535

# Tile sizes and warps. The SSM tile is a flat, contiguous chunk of one state entry; the conv tile a flat chunk of
# one [dim, K-1] window (whole window rows in the tail mode). 64 KiB SSM tiles with 8 warps were the fastest of
# 4..128 KiB x 4/8 warps on an H200 at batch 64 and 128 (the ``sweep`` rows of benchmarks/results/history.csv,
# 2026-11-29); at batch 1 every tiling was within the noise of the host-bound timing.
SSM_TILE_BYTES = 65536
SSM_NUM_WARPS = 8
CONV_TILE_ELEMS = 4096
CONV_NUM_WARPS = 4


def launch_config(kind: str, itemsize: int = 4) -> tuple[int, int]:
    """(block elements, num_warps) for one tile of ``kind`` ("ssm", "conv")."""
    if kind == "ssm":
        return max(triton.next_power_of_2(SSM_TILE_BYTES // itemsize), 4), SSM_NUM_WARPS
    if kind == "conv":
        return CONV_TILE_ELEMS, CONV_NUM_WARPS
    raise ValueError(f"unknown tile kind {kind!r}")


def _fmt(t: torch.Tensor) -> str:
    return f"shape={tuple(t.shape)} stride={tuple(t.stride())} dtype={t.dtype} device={t.device}"


def check_state_tensor(name: str, t, ndim_min: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name}: dtype {t.dtype} not supported (bf16, fp16, fp32): {_fmt(t)}")
    if t.ndim < ndim_min:
        raise ValueError(f"{name}: expected at least {ndim_min} dims, got {_fmt(t)}")


def check_index_pair(steps_name: str, steps, slots_name: str, slots, device: torch.device, max_rows: int) -> int:
    """Validate one (steps, slots) index set; returns its number of rows."""
    # Fast path (every call): attribute reads only, no device work.
    if (
        isinstance(steps, torch.Tensor)
        and isinstance(slots, torch.Tensor)
        and steps.dtype in INDEX_DTYPES
        and slots.dtype in INDEX_DTYPES
        and steps.ndim == 1
        and slots.ndim == 1
        and steps.device == device
        and slots.device == device
        and steps.is_contiguous()
        and slots.is_contiguous()
    ):
        n = steps.shape[0]
        if slots.shape[0] == n and n <= max_rows:
            return n
    # Slow path: say what is wrong.
    check_index(steps_name, steps, device)
    check_index(slots_name, slots, device)
    n = steps.shape[0]
    if slots.shape[0] != n:
        raise ValueError(f"{steps_name} has {n} rows but {slots_name} has {slots.shape[0]}")
    raise ValueError(f"{steps_name} has {n} rows but the source has only {max_rows} rows (row r copies source row r)")


def check_index(name: str, t, device: torch.device) -> None:
    """One index tensor: a contiguous 1-D int32/int64 tensor on ``device``."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in INDEX_DTYPES:
        raise TypeError(f"{name} must be int32 or int64, got {t.dtype}")
    if t.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, expected {device} (same device as the states)")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got stride {t.stride()}")


def entry_is_dense(t: torch.Tensor, start_dim: int) -> bool:
    """True when dims ``start_dim..`` of ``t`` are laid out contiguously (row-major)."""
    expected = 1
    for i in range(t.ndim - 1, start_dim - 1, -1):
        if t.shape[i] != 1 and t.stride(i) != expected:
            return False
        expected *= t.shape[i]
    return True


def may_overlap_itself(t: torch.Tensor) -> bool:
    """False when no two elements of ``t`` can share memory, judged from shape and strides alone: the dims of size > 1,
    by increasing stride, must each step over the whole extent of the smaller ones. Slices, permutations and
    reshapes of a dense buffer pass; ``expand``, overlapping ``as_strided`` rows and rarer interleavings do not."""
    extent = 1  # elements spanned by the dims checked so far
    for stride, size in sorted((t.stride(i), t.shape[i]) for i in range(t.ndim) if t.shape[i] > 1):
        if stride < extent:
            return True
        extent += (size - 1) * stride
    return False
