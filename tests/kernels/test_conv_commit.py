"""conv_commit: bit-exact against the reference and SGLang 0.5.23's window kernels."""

from tests.support.kernels import (  # noqa: I001  (sets TRITON_INTERPRET before triton loads)
    DEVICE,
    DTYPE_IDS,
    DTYPES,
    assert_bitwise_equal,
    assert_outside_view_untouched,
    conv_source,
    make_index_set,
    new_generator,
    poison,
    sglang_dense_scatter,
    sglang_window_scatter,
    strided_dst,
)

import pytest
import torch

from sglang_mamba_dedup.kernels import conv_commit
from tests.support.reference import conv_commit_reference

L, R, DIM, N_SLOTS = 2, 5, 7, 13


def _run_both(conv_dst, conv_src, **idx):
    expected = conv_dst.clone()
    conv_commit_reference(conv_dst=expected, conv_src=conv_src, **idx)
    conv_commit(conv_dst=conv_dst, conv_src=conv_src, **idx)
    return expected


@pytest.mark.parametrize("src_kind", ["dedup", "dense"])
@pytest.mark.parametrize("K", [2, 3, 4], ids=lambda k: f"K{k}")
@pytest.mark.parametrize("D", [1, 2, 4, 8], ids=lambda d: f"D{d}")
def test_conv_commit_matches_reference_and_sglang(D, K, src_kind):
    g, seed = new_generator()
    src = conv_source(src_kind, L, R, D, K, DIM, torch.bfloat16, g)
    steps, slots = make_index_set(R, D, N_SLOTS, g)
    dst = poison(torch.empty((L, N_SLOTS, DIM, K - 1), dtype=torch.bfloat16, device=DEVICE))
    before = dst.clone()
    expected = _run_both(dst, src, accept_steps=steps, accept_slots=slots)
    assert_bitwise_equal(dst, expected, f"seed={seed} vs reference")
    # untouched slots keep their poison, byte for byte
    valid = [s for s, t in zip(slots.tolist(), steps.tolist()) if 0 <= t < D and 0 <= s < N_SLOTS]
    untouched = [s for s in range(N_SLOTS) if s not in valid]
    assert_bitwise_equal(dst[:, untouched], before[:, untouched], f"seed={seed} untouched slots")
    # SGLang's own kernel on the same inputs
    theirs = poison(torch.empty_like(dst))
    if src_kind == "dedup":
        sglang_window_scatter(theirs, src, slots, steps)
    else:
        sglang_dense_scatter(theirs, src, slots, steps)
    assert_bitwise_equal(dst, theirs, f"seed={seed} vs SGLang 0.5.23")


@pytest.mark.parametrize("track", [False, True], ids=["accept", "accept+track"])
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64], ids=lambda t: DTYPE_IDS[t])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: DTYPE_IDS[t])
def test_conv_commit_dtypes_strided_dst_track(dtype, idx_dtype, track):
    g, seed = new_generator()
    D, K = 4, 4
    src = conv_source("dedup", L, R, D, K, DIM, dtype, g)
    steps, slots = make_index_set(R, D, N_SLOTS, g, idx_dtype=idx_dtype)
    idx = dict(accept_steps=steps, accept_slots=slots)
    if track:
        t_steps, t_slots = make_index_set(R, D, N_SLOTS, g, idx_dtype=idx_dtype, skip_every=2, taken=slots.tolist())
        idx.update(track_steps=t_steps, track_slots=t_slots)
    dst, big = strided_dst((L, N_SLOTS, DIM, K - 1), dtype)
    big_before = big.clone()
    expected = _run_both(dst, src, **idx)
    assert_bitwise_equal(dst, expected, f"seed={seed}")
    assert_outside_view_untouched(dst, big, big_before, f"seed={seed}")


def test_conv_commit_all_rows_skipped_leaves_dst_untouched():
    g, _ = new_generator()
    src = conv_source("dedup", L, R, 4, 4, DIM, torch.bfloat16, g)
    dst = poison(torch.empty((L, N_SLOTS, DIM, 3), dtype=torch.bfloat16, device=DEVICE))
    before = dst.clone()
    steps = torch.tensor([-1, 0, 4, 2, -7], device=DEVICE)
    slots = torch.tensor([3, -1, 2, N_SLOTS, 1 << 40], device=DEVICE)
    conv_commit(conv_dst=dst, conv_src=src, accept_steps=steps, accept_slots=slots)
    assert_bitwise_equal(dst, before, "every row should be skipped")


def test_conv_commit_empty_batch_is_noop():
    g, _ = new_generator()
    src = conv_source("dense", L, R, 2, 3, DIM, torch.float32, g)
    dst = poison(torch.empty((L, N_SLOTS, DIM, 2), device=DEVICE))
    e = torch.empty(0, dtype=torch.int64, device=DEVICE)
    conv_commit(conv_dst=dst, conv_src=src, accept_steps=e, accept_slots=e)
    assert torch.isnan(dst).all()
