"""ssm_commit: bit-exact against the reference and SGLang 0.5.23's dense scatter kernel."""

from tests.support.kernels import (  # noqa: I001  (sets TRITON_INTERPRET before triton loads)
    DEVICE,
    DTYPE_IDS,
    DTYPES,
    assert_bitwise_equal,
    assert_outside_view_untouched,
    make_index_set,
    new_generator,
    poison,
    rand,
    sglang_dense_scatter,
)

import pytest
import torch

from sglang_mamba_dedup.kernels import ssm_commit
from tests.support.reference import ssm_commit_reference

L, R, N_SLOTS = 2, 5, 11
SHAPE = (3, 5, 7)  # odd, not a multiple of the tile


def _slot_strided_dst(dtype):
    """[L, N_SLOTS, *SHAPE] view with padded layer and slot strides (entries dense)."""
    big = poison(torch.empty((L + 1, N_SLOTS + 2, *SHAPE), dtype=dtype, device=DEVICE))
    return big[1:, 2:], big


@pytest.mark.parametrize("track", [False, True], ids=["accept", "accept+track"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: DTYPE_IDS[t])
@pytest.mark.parametrize("D", [1, 2, 4, 8], ids=lambda d: f"D{d}")
def test_ssm_commit_matches_reference_and_sglang(D, dtype, track):
    g, seed = new_generator()
    src = rand((L, R, D, *SHAPE), dtype, g)
    steps, slots = make_index_set(R, D, N_SLOTS, g, idx_dtype=torch.int32 if D % 2 else torch.int64)
    idx = dict(accept_steps=steps, accept_slots=slots)
    if track:
        t_steps, t_slots = make_index_set(R, D, N_SLOTS, g, skip_every=2, taken=slots.tolist())
        idx.update(track_steps=t_steps, track_slots=t_slots)
    dst, big = _slot_strided_dst(dtype)
    big_before = big.clone()
    expected = dst.clone()
    ssm_commit_reference(ssm_dst=expected, ssm_src=src, **idx)
    ssm_commit(ssm_dst=dst, ssm_src=src, **idx)
    assert_bitwise_equal(dst, expected, f"seed={seed} vs reference")
    assert_outside_view_untouched(dst, big, big_before, f"seed={seed}")

    theirs = poison(torch.empty_like(dst))
    sglang_dense_scatter(theirs, src, slots, steps)
    if track:
        sglang_dense_scatter(theirs, src, idx["track_slots"], idx["track_steps"])
    assert_bitwise_equal(dst, theirs, f"seed={seed} vs SGLang 0.5.23")


def test_ssm_commit_tile_multiple_entry():
    """An entry that is an exact multiple of the tile (the unmasked path)."""
    g, seed = new_generator()
    from sglang_mamba_dedup.kernels._validate import launch_config

    block, _ = launch_config("ssm", 4)
    src = rand((1, 2, 2, 2, block), torch.float32, g)
    dst = poison(torch.empty((1, 4, 2, block), device=DEVICE))
    steps = torch.tensor([1, 0], device=DEVICE)
    slots = torch.tensor([3, 1], device=DEVICE)
    expected = dst.clone()
    ssm_commit_reference(ssm_dst=expected, ssm_src=src, accept_steps=steps, accept_slots=slots)
    ssm_commit(ssm_dst=dst, ssm_src=src, accept_steps=steps, accept_slots=slots)
    assert_bitwise_equal(dst, expected, f"seed={seed}")
