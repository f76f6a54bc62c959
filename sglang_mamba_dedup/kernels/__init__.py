"""The Triton kernels for the deduplicated Mamba/GDN state layout. Importing this package imports neither torch nor
Triton; the serving path imports the modules below by name, where it uses them (a reader follows each call
statically): ``patches/commit.py`` when a route binds its fused committer, zero-copy's bookkeeping at its own import.

* :func:`load` -- whether the commit kernel imports in this process: it imports :mod:`.state_commit` once and keeps
  the module or the failure, for ``patches/commit.py``'s ``kernel_problem()`` (asked at pool and route build, so
  that no committer imports a kernel that cannot load);
* :mod:`.state_commit` -- the commit kernel, its :func:`~.state_commit.launch` and :func:`fused_commit` (all layers,
  all conv kinds, the SSM state, accept and track index sets, one launch);
* :mod:`.descriptor` -- :func:`~.descriptor.get_plan` and :func:`~.descriptor.build_plan` (the one place state
  tensors are validated) and the plan cache;
* :mod:`.seed_index` -- zero-copy's verify tables (:func:`~.seed_index.seeded_rows`), the second Triton kernel;
* :mod:`.single_kind` -- :func:`conv_commit` / :func:`ssm_commit` (one kind of state) and :func:`tail_copy`
  (vLLM's DS tail copy), imported on first use; :mod:`._direct_launch` -- the compiled-kernel fast path (the
  only code on Triton internals); :mod:`._validate` -- launch configuration and argument checks.

The contract every function here keeps:

* Row ``r`` of an index set ``(steps, slots)`` copies *source row* ``r`` (the request's position in the verify
  batch, as SGLang does) at draft step ``s = steps[r]`` into slot ``slots[r]``; it is skipped, in the kernel and
  without host synchronisation, when ``s < 0``, ``s >= D``, ``slot < 0`` or ``slot >= slots+1``. An optional
  source-row table (:func:`tail_copy`) makes row ``r`` read source row ``src_rows[r]``, skipped outside ``[0, R)``.
* Address arithmetic on a layer, row, step or slot index is int64; only the element offset inside one
  (layer, slot) entry is int32 (the plan checks that an entry has fewer than 2**31 elements; the tail mode
  indexes whole window rows in int64).
* Copies are bitwise: every dtype moves as an integer of its width (NaN payloads and signed zeros survive).
* Duplicated destinations (two valid rows naming one slot) race: every element of the slot ends up with the bytes
  of one of the rows (element stores are atomic), which one is unspecified, so bit-identical sources give an exact
  result. Detecting them needs a host sync; SGLang produces them only for padding rows aimed at the scratch slot.
* The first call for a set of tensors validates them and caches a small int64 descriptor table on the device,
  keyed on each tensor's data_ptr, shape, strides, dtype and device (a tensor changed in place gets a new one):
  make it outside CUDA graph capture. Later calls with the same, unchanged tensors are capturable.
"""

from __future__ import annotations

from types import ModuleType

__all__ = ["load", "fused_commit", "conv_commit", "ssm_commit", "tail_copy", "clear_plan_cache", "cached_plan_count"]

#: :func:`load`'s memo: the kernel module once imported, or why it did not import (both kept for the process)
_kernel: ModuleType | None = None
_kernel_error: str | None = None


def load() -> ModuleType:
    """The commit kernel's module, :mod:`.state_commit`, imported on the first call and kept: the availability check
    (callers then import the kernel modules by name). Importing this package imports neither torch nor Triton; this
    does. Where it does not import (Triton broken, no compiler), ImportError with the first failure's text, on every
    call, without trying again."""
    global _kernel, _kernel_error
    if _kernel is not None:
        return _kernel
    if _kernel_error is not None:
        raise ImportError(_kernel_error)
    try:
        from . import state_commit
    except Exception as exc:  # noqa: BLE001 - any import failure means 'not available'
        _kernel_error = f"{type(exc).__name__}: {exc}"
        raise ImportError(_kernel_error) from exc
    _kernel = state_commit
    return state_commit


def __getattr__(name: str):
    """The public functions, imported on first use (the serving path imports the kernel modules by name instead)."""
    if name == "fused_commit":
        return load().fused_commit
    if name in ("cached_plan_count", "clear_plan_cache"):
        from . import descriptor

        return getattr(descriptor, name)
    if name in ("conv_commit", "ssm_commit", "tail_copy"):
        from . import single_kind

        return getattr(single_kind, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
