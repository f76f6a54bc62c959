"""Helpers for the commit-kernel tests.

Importing this module first makes the kernels run under Triton's interpreter on
CPU tensors when no GPU is present (``TRITON_INTERPRET`` is read when a
``@triton.jit`` function is decorated, i.e. when its module is imported).  With a
GPU the same tests run on CUDA tensors through the compiled kernels.
"""

from __future__ import annotations

import os
import random

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# A device the states are not on, for the wrong-device errors ("meta" when CPU is all we have).
OTHER_DEVICE = torch.device("cpu") if DEVICE.type == "cuda" else torch.device("meta")
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
DTYPE_IDS = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float32: "fp32",
    torch.int32: "i32",
    torch.int64: "i64",
}
_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def new_generator() -> tuple[torch.Generator, int]:
    """A generator with a fresh seed per test (printed on failure via the message)."""
    seed = random.SystemRandom().randrange(2**31)
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g, seed


def rand(shape, dtype, g: torch.Generator, device=DEVICE) -> torch.Tensor:
    """Random normal values (never zeros), made on CPU with ``g`` then moved."""
    return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype).to(device)


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill in place with NaN (float) so unwritten elements fail the comparison."""
    t.fill_(float("nan"))
    return t


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of ``t`` as an integer tensor of the same shape (NaN-safe comparison)."""
    return t.view(_INT_VIEW[t.element_size()])


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor, msg: str = "", max_show: int = 8) -> None:
    """``torch.equal`` on the raw bits; on failure report the mismatch count,
    the first indices and the values (NaNs listed as such)."""
    assert actual.shape == expected.shape, f"{msg} shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{msg} dtype {actual.dtype} != {expected.dtype}"
    a, e = bits(actual), bits(expected)
    if torch.equal(a, e):
        return
    bad = (a != e).nonzero()
    lines = [f"{msg}: {bad.shape[0]} of {a.numel()} elements differ bitwise; first {min(max_show, bad.shape[0])}:"]
    for idx in bad[:max_show].tolist():
        av, ev = actual[tuple(idx)].item(), expected[tuple(idx)].item()
        lines.append(f"  at {tuple(idx)}: got {av!r} expected {ev!r}")
    n_nan_a = torch.isnan(actual.float()).sum().item()
    n_nan_e = torch.isnan(expected.float()).sum().item()
    lines.append(f"  NaNs: got {n_nan_a}, expected {n_nan_e}")
    raise AssertionError("\n".join(lines))


def strided_dst(shape, dtype, device=DEVICE, pad=(0, 3, 1, 2)) -> tuple[torch.Tensor, torch.Tensor]:
    """A NaN-poisoned view of ``shape`` cut from a larger NaN buffer (each dim padded by
    ``pad``, cycled), so every stride is non-trivial.  Returns (view, backing buffer)."""
    big_shape = [n + pad[i % len(pad)] for i, n in enumerate(shape)]
    big = poison(torch.empty(big_shape, dtype=dtype, device=device))
    view = big[tuple(slice(1 if pad[i % len(pad)] else 0, None) for i in range(len(shape)))]
    view = view[tuple(slice(0, n) for n in shape)]
    assert view.shape == tuple(shape)
    return view, big


def dedup_phys(L, R, D, K, dim, dtype, g, device=DEVICE):
    """Random ``phys [L, R, dim, D+K-2]`` and the overlapping window view
    ``view[l, r, t, d, w] = phys[l, r, d, t + w]`` (logical ``[L, R, D, dim, K-1]``)."""
    phys = rand((L, R, dim, D + K - 2), dtype, g, device)
    sl, sr, sd, sw = phys.stride()
    view = phys.as_strided((L, R, D, dim, K - 1), (sl, sr, sw, sd, sw))
    return phys, view


def conv_source(kind: str, L, R, D, K, dim, dtype, g, device=DEVICE):
    """``kind`` "dedup" (overlapping view) or "dense" (a contiguous window buffer)."""
    if kind == "dedup":
        return dedup_phys(L, R, D, K, dim, dtype, g, device)[1]
    assert kind == "dense"
    return rand((L, R, D, dim, K - 1), dtype, g, device)


def make_index_set(B, D, n_slots, g, idx_dtype=torch.int64, skip_every=3, device=DEVICE, taken=()):
    """Steps in [0, D) and distinct slots in [1, n_slots) (slot 0 = scratch), not in ``taken``;
    every ``skip_every``-th row gets -1 in its step or its slot, alternately, and one row
    gets an out-of-range step or slot when B > 3."""
    free = [s for s in range(1, n_slots) if s not in set(taken)]
    perm = torch.randperm(len(free), generator=g)[:B].tolist()
    slots = [free[i] for i in perm]
    steps = torch.randint(0, D, (B,), generator=g).tolist()
    for r in range(0, B, skip_every) if skip_every else ():
        if (r // skip_every) % 2 == 0:
            steps[r] = -1
        else:
            slots[r] = -1
    if B > 3:
        steps[1] = D  # out of range: skipped
        slots[2] = n_slots + 5  # out of range: skipped
    return (
        torch.tensor(steps, dtype=idx_dtype, device=device),
        torch.tensor(slots, dtype=idx_dtype, device=device),
    )


# ---------------------------------------------------------------- SGLang 0.5.23 kernels, called directly


_SCATTER_MODULES = (
    "sglang.kernels.ops.mamba.mamba_state_scatter_triton",  # 0.5.17 ... 0.5.23
    "sglang.srt.layers.attention.mamba.mamba_state_scatter_triton",  # 0.5.11 ... 0.5.15.post1
)


def sglang_module():
    """The installed SGLang's scatter module (its public wrappers refuse CPU tensors, so
    the tests launch its ``@triton.jit`` kernels directly); skip when there is none."""
    import importlib

    import pytest

    for name in _SCATTER_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    pytest.skip("no SGLang scatter module importable")


def sglang_dense_scatter(dst, src, slots, steps):
    """``_fused_mamba_state_scatter_with_mask_kernel``: dense source, src row r = request r.
    0.5.13.post1's kernel has no source-row argument; 0.5.23's takes one."""
    import inspect

    import triton

    m = sglang_module()
    kernel = m._fused_mamba_state_scatter_with_mask_kernel
    n = steps.shape[0]
    elem = dst[0, 0].numel()
    rows = ()
    if "src_indices_raw_ptr" in inspect.signature(kernel.fn).parameters:
        rows = (torch.arange(n, dtype=torch.int32, device=dst.device),)
    grid = (n, dst.shape[0], triton.cdiv(elem, 1024))
    kernel[grid](
        src,
        dst,
        slots.to(torch.int32),
        steps.to(torch.int32),
        *rows,
        elem,
        src.stride(0),
        src.stride(1),
        src.stride(2),
        dst.stride(0),
        dst.stride(1),
        src.shape[1],
        src.shape[2],
        dst.shape[1],
        BLOCK_SIZE=1024,
    )


def sglang_window_scatter(dst, src, slots, steps):
    """``_fused_conv_window_scatter_with_mask_kernel``: strided (dedup) window source."""
    import triton

    m = sglang_module()
    if not hasattr(m, "_fused_conv_window_scatter_with_mask_kernel"):
        import pytest

        pytest.skip("this SGLang has no conv-window scatter kernel (no dedup before 0.5.14)")
    n = steps.shape[0]
    dim, km1 = dst.shape[2], dst.shape[3]
    src_rows = torch.arange(n, dtype=torch.int32, device=dst.device)
    grid = (n, dst.shape[0], triton.cdiv(dim * km1, 1024))
    m._fused_conv_window_scatter_with_mask_kernel[grid](
        src,
        dst,
        slots.to(torch.int32),
        steps.to(torch.int32),
        src_rows,
        dim * km1,
        km1,
        *src.stride(),
        dst.stride(0),
        dst.stride(1),
        src.shape[1],
        src.shape[2],
        dst.shape[1],
        BLOCK_SIZE=1024,
    )


def assert_outside_view_untouched(
    view: torch.Tensor, big: torch.Tensor, big_before: torch.Tensor, msg: str = ""
) -> None:
    """Every element of ``big`` that ``view`` does not cover kept its bytes."""
    covered = torch.zeros(big.shape, dtype=torch.bool, device=big.device)
    covered.as_strided(view.shape, view.stride(), view.storage_offset()).fill_(True)
    outside = ~covered
    assert outside.any()
    assert torch.equal(bits(big)[outside], bits(big_before)[outside]), f"{msg}: wrote outside the destination view"
