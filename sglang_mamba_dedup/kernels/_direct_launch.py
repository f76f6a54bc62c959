"""The direct launch of the compiled commit kernel: Triton's compiled launcher called with pre-packed arguments,
skipping Triton's per-call binding, specialisation and cache lookup (more host time than the copy itself at batch
1). The one place on Triton internals: ``JITFunction.device_caches[device][4]`` (the argument binder) and
``CompiledKernel.run`` / ``.function`` / ``.packed_metadata``, checked on Triton 3.6 (the lent H200) and 3.7; every
use is guarded (the binder's result must equal the arguments this launcher passes, and a call with another
specialisation key returns False so that Triton's own launch serves it).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import triton

logger = logging.getLogger("sglang_mamba_dedup")


def launch_hooks_set(kernel: Any = None) -> bool:
    """True when Triton's own launch would do more than the direct one: a launch hook (a profiler's), a
    pre-run hook on the kernel, a stages-inspection hook, TRITON_DEBUG or an instrumentation mode (these
    change the key of the compiled variant). Then launches go through Triton. Attribute reads only."""
    knobs = getattr(triton, "knobs", None)
    rt = getattr(knobs, "runtime", None)
    if rt is None:
        return True  # a Triton without knobs: never launch directly
    for hook in (getattr(rt, "launch_enter_hook", None), getattr(rt, "launch_exit_hook", None)):
        if hook is not None and getattr(hook, "calls", True):  # a HookChain with hooks, or a plain callable
            return True
    if getattr(rt, "debug", False) or getattr(rt, "add_stages_inspection_hook", None) is not None:
        return True
    if getattr(getattr(knobs, "compilation", None), "instrumentation_mode", ""):
        return True
    return bool(getattr(kernel, "pre_run_hooks", None))


class DirectLaunch:
    """One compiled variant of the kernel. A call takes the direct path only when every index tensor has the dtype
    and 16-byte alignment it had at the first launch, pointer by pointer (Triton's specialisation key), on the same
    device: then Triton would have picked this same compiled kernel. Pointers are passed as integers."""

    __slots__ = ("run", "function", "metadata", "head", "tail", "dtypes", "aligned", "device_index", "stream_of")

    def __init__(self, compiled, packed: list, index: tuple, device_index: int, stream_of) -> None:
        as_ptr = [p.data_ptr() if isinstance(p, torch.Tensor) else p for p in packed]
        self.run = compiled.run
        self.function = compiled.function
        self.metadata = compiled.packed_metadata
        self.head = tuple(as_ptr[:3])  # meta, ssm_src, ssm_dst
        self.tail = tuple(as_ptr[3 + len(index) + 1 :])  # after the index tensors and n_acc
        self.dtypes = tuple(t.dtype for t in index)
        # Triton specialises each pointer argument on its own 16-byte divisibility: one flag per pointer
        self.aligned = tuple(t.data_ptr() % 16 == 0 for t in index)
        self.device_index = device_index
        self.stream_of = stream_of

    @classmethod
    def build(cls, kernel, compiled, args: tuple, kwargs: dict, n_index: int) -> DirectLaunch | None:
        """``kernel``: the ``JITFunction``; ``args``/``kwargs``: the launch just made (index tensors at ``args[3:]``)."""
        try:
            from triton.runtime import driver

            device_index = driver.active.get_current_device()
            binder = kernel.device_caches[device_index][4]
            bound, _, _ = binder(*args, **kwargs)
            values = tuple(bound.values())
            names = kernel.arg_names
            packed = list(args) + [kwargs[n] for n in names[len(args) :]]
            if len(values) != len(packed) or any(
                (v is not p) if isinstance(p, torch.Tensor) else (v != p) for v, p in zip(values, packed)
            ):
                raise RuntimeError("Triton binds the kernel's arguments differently")
            return cls(compiled, packed, args[3 : 3 + n_index], device_index, driver.active.get_current_stream)
        except Exception as exc:  # noqa: BLE001 - any mismatch: Triton's own path serves every call
            logger.debug("sglang-mamba-dedup: direct kernel launch unavailable (%s); using Triton's launch", exc)
            return None

    def launch(self, grid: tuple[int, int, int], index: tuple, n_acc: int, kernel: Any = None) -> bool:
        """Launch on the current stream; False (nothing launched) when this variant does not apply."""
        a, b, c, d, e = index
        ptrs = (a.data_ptr(), b.data_ptr(), c.data_ptr(), d.data_ptr(), e.data_ptr())
        if (
            (a.dtype, b.dtype, c.dtype, d.dtype, e.dtype) != self.dtypes
            or (ptrs[0] % 16 == 0, ptrs[1] % 16 == 0, ptrs[2] % 16 == 0, ptrs[3] % 16 == 0, ptrs[4] % 16 == 0)
            != self.aligned
            or torch.cuda.current_device() != self.device_index
            or launch_hooks_set(kernel)
        ):
            return False
        self.run(
            *grid,
            self.stream_of(self.device_index),
            self.function,
            self.metadata,
            None,
            None,
            None,
            *self.head,
            *ptrs,
            n_acc,
            *self.tail,
        )
        return True
