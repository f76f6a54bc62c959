"""tail_copy (vLLM's DS tail copy): dst[db, d, 0:W-b] = src[sb, d, b:W], tail untouched."""

from tests.support.kernels import (  # noqa: I001  (sets TRITON_INTERPRET before triton loads)
    DEVICE,
    DTYPE_IDS,
    DTYPES,
    assert_bitwise_equal,
    new_generator,
    poison,
    rand,
)

import pytest
import torch

from sglang_mamba_dedup.kernels import cached_plan_count, clear_plan_cache, tail_copy
from tests.support.reference import tail_copy_reference

N_BLOCKS, DIM, W = 6, 67, 7  # dim spans two BLOCK_D tiles, W not a power of two


def _idx(values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype, device=DEVICE)


@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64], ids=lambda t: DTYPE_IDS[t])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: DTYPE_IDS[t])
@pytest.mark.parametrize("blocks", ["same_block", "other_block", "other_tensor"])
@pytest.mark.parametrize("offset", [1, 2, 3], ids=lambda b: f"b{b}")
def test_tail_copy_matches_reference(offset, blocks, dtype, idx_dtype):
    g, seed = new_generator()
    state = rand((N_BLOCKS, DIM, W), dtype, g)
    # a second request with a different offset, on its own blocks
    if blocks == "same_block":  # in-place left shift: memmove semantics
        src, dst, sb, db = state, state, [1, 4], [1, 4]
    elif blocks == "other_block":
        src, dst, sb, db = state, state, [1, 4], [2, 0]
    else:
        src, dst, sb, db = (
            state,
            poison(torch.empty((N_BLOCKS + 1, DIM, W), dtype=dtype, device=DEVICE)),
            [1, 4],
            [6, 0],
        )
    offs = [offset, 4 - offset]
    exp_src = src.clone()
    exp_dst = exp_src if dst is src else dst.clone()
    tail_copy_reference(exp_src, exp_dst, _idx(sb), _idx(db), _idx(offs))
    dst_before = dst.clone()
    tail_copy(src, dst, _idx(sb, idx_dtype), _idx(db, idx_dtype), _idx(offs, idx_dtype))
    assert_bitwise_equal(dst, exp_dst, f"seed={seed}")
    if dst is not src:
        assert_bitwise_equal(src, exp_src, f"seed={seed} source changed")
    # explicit: shifted window and untouched tail
    for s_blk, d_blk, b in zip(sb, db, offs):
        src_orig = dst_before[s_blk] if dst is src else src[s_blk]
        assert_bitwise_equal(dst[d_blk, :, : W - b], src_orig[:, b:], f"seed={seed} window")
        assert_bitwise_equal(dst[d_blk, :, W - b :], dst_before[d_blk, :, W - b :], f"seed={seed} tail")


def test_tail_copy_strided_views():
    """src and dst as views with non-trivial strides (dim-first inside bigger buffers)."""
    g, seed = new_generator()
    big_src = rand((N_BLOCKS, DIM + 3, W + 5), torch.bfloat16, g)
    big_dst = poison(torch.empty((N_BLOCKS + 2, W + 2, DIM + 1), dtype=torch.bfloat16, device=DEVICE))
    src = big_src[:, 1 : DIM + 1, 2 : W + 2]
    dst = big_dst[1:-1, :W, :DIM].transpose(1, 2)  # [blocks, DIM, W], w-stride != 1
    before = big_dst.clone()
    sb, db, offs = _idx([0, 5, 3]), _idx([2, 4, 5]), _idx([1, 3, 2])
    exp = dst.clone()
    tail_copy_reference(src, exp, sb, db, offs)
    tail_copy(src, dst, sb, db, offs)
    assert_bitwise_equal(dst, exp, f"seed={seed}")
    covered = torch.zeros_like(big_dst, dtype=torch.bool)
    covered[1:-1, :W, :DIM] = True
    assert torch.equal(big_dst[~covered].view(torch.int16), before[~covered].view(torch.int16))


def test_tail_copy_skips():
    """Negative or out-of-range blocks, offsets outside [0, W), b == 0 onto itself: no write."""
    g, seed = new_generator()
    state = rand((N_BLOCKS, DIM, W), torch.float32, g)
    before = state.clone()
    sb = _idx([-1, 0, 2, 3, N_BLOCKS, 1, 2])
    db = _idx([0, -1, 2, 3, 1, N_BLOCKS + 4, 2])
    offs = _idx([1, 1, 0, W, 1, 2, -1])
    tail_copy(state, state, sb, db, offs)
    assert_bitwise_equal(state, before, f"seed={seed}")


def test_tail_copy_offset_zero_other_tensor_copies_everything():
    g, seed = new_generator()
    src = rand((2, DIM, W), torch.float16, g)
    dst = poison(torch.empty((2, DIM, W), dtype=torch.float16, device=DEVICE))
    tail_copy(src, dst, _idx([1]), _idx([0]), _idx([0]))
    assert_bitwise_equal(dst[0], src[1], f"seed={seed}")
    assert torch.isnan(dst[1]).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_tail_copy_int64_offsets_past_2_31():
    if torch.cuda.mem_get_info()[0] < 8 * 2**30:
        pytest.skip("needs ~5 GiB of free GPU memory")
    g, seed = new_generator()
    n_blocks, dim, w = 40_000, 8192, 7  # 2.3e9 elements of bf16
    state = torch.full((n_blocks, dim, w), 5.0, dtype=torch.bfloat16, device="cuda")
    state[n_blocks - 1] = rand((dim, w), torch.bfloat16, g, "cuda")
    row = state[n_blocks - 1].clone()
    tail_copy(state, state, _idx([n_blocks - 1]), _idx([n_blocks - 1]), _idx([3]))
    torch.cuda.synchronize()
    assert torch.equal(bits_(state[n_blocks - 1, :, : w - 3]), bits_(row[:, 3:])), f"seed={seed}"
    assert torch.equal(bits_(state[n_blocks - 1, :, w - 3 :]), bits_(row[:, w - 3 :]))
    assert (state[n_blocks - 2] == 5.0).all()


def bits_(t):
    return t.contiguous().view(torch.int16)


@pytest.mark.parametrize("layout", ["block_stride_0", "dim_stride_0", "blocks_alias_rows"])
def test_tail_copy_rejects_self_overlapping_destination(layout):
    """Destination rows that share memory would race (and break the in-place shift): refused up front."""
    g, seed = new_generator()
    src = rand((N_BLOCKS, DIM, W), torch.float32, g)
    if layout == "block_stride_0":  # every block is the same memory
        dst = torch.zeros((1, DIM, W), device=DEVICE).expand(N_BLOCKS, DIM, W)
    elif layout == "dim_stride_0":  # every dim row of a block is the same memory
        dst = torch.zeros((N_BLOCKS, 1, W), device=DEVICE).expand(N_BLOCKS, DIM, W)
    else:  # block b + 1 starts at row 1 of block b
        dst = torch.zeros((N_BLOCKS + DIM) * W, device=DEVICE).as_strided((N_BLOCKS, DIM, W), (W, W, 1))
    before = dst.clone()
    i = _idx([0, 1])
    with pytest.raises(ValueError, match="overlaps itself"):
        tail_copy(src, dst, i, _idx([2, 3]), i)
    assert_bitwise_equal(dst, before, f"seed={seed} written before the check")


def test_tail_copy_accepts_aliased_source_and_size_one_broadcast():
    """Only destination rows must be distinct: a broadcast source is fine, and so is a
    stride-0 dimension of size 1 in the destination."""
    g, seed = new_generator()
    row = rand((1, DIM, W), torch.float32, g)
    src = row.expand(N_BLOCKS, DIM, W)  # block stride 0: every block reads the same memory
    dst = poison(torch.empty((1, DIM, W), device=DEVICE)).as_strided((1, DIM, W), (0, W, 1))
    sb, db, offs = _idx([4]), _idx([0]), _idx([2])
    exp = dst.clone()
    tail_copy_reference(src, exp, sb, db, offs)
    tail_copy(src, dst, sb, db, offs)
    assert_bitwise_equal(dst, exp, f"seed={seed}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=lambda t: DTYPE_IDS[t])
def test_tail_copy_in_place_shift_over_several_tiles(dtype):
    """An in-place shift whose block spans several programs (tiles of whole window rows):
    no program may read a value another one already shifted."""
    from sglang_mamba_dedup.kernels._validate import launch_config

    g, seed = new_generator()
    rows_per_tile = launch_config("conv")[0] // W
    dim = 3 * rows_per_tile + 5  # three full tiles and a ragged one
    state = rand((3, dim, W), dtype, g)
    sb = db = _idx([2, 0])
    offs = _idx([3, 1])
    exp = state.clone()
    tail_copy_reference(exp, exp, sb, db, offs)
    tail_copy(state, state, sb, db, offs)
    assert_bitwise_equal(state, exp, f"seed={seed}")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_tail_copy_more_requests_than_one_launch_takes():
    """More than 65535 requests (the grid's row axis): several launches, every request done."""
    g, seed = new_generator()
    n, dim, w = 70_000, 4, 3
    src = rand((n, dim, w), torch.float32, g)
    dst = poison(torch.empty((n, dim, w), device=DEVICE))
    offs = torch.arange(n, device=DEVICE) % (w + 1)
    blocks = torch.arange(n, device=DEVICE)
    tail_copy(src, dst, blocks.flip(0), blocks, offs)
    exp = poison(torch.empty_like(dst))
    rev = src.flip(0)
    for b in range(w + 1):
        sel = offs == b
        exp[sel, :, : w - b] = rev[sel, :, b:]
    assert_bitwise_equal(dst, exp, f"seed={seed}")


def test_tail_copy_plan_lives_with_the_destination():
    """tail_copy launches through temporary views of ``dst``; its plan is cached with ``dst`` itself, so a
    second call reuses it (and a CUDA graph that captured a launch keeps a live descriptor table)."""
    import gc

    clear_plan_cache()
    g, seed = new_generator()
    src = rand((4, 5, 3), torch.float32, g)
    dst = poison(torch.empty((4, 5, 3), dtype=torch.float32, device=DEVICE))
    idx = torch.tensor([0, 1], device=DEVICE)
    tail_copy(src, dst, idx, idx, torch.tensor([1, 0], device=DEVICE))
    gc.collect()
    assert cached_plan_count() == 1, f"seed={seed}: the plan must outlive the call ({cached_plan_count()} cached)"
    tail_copy(src, dst, idx, idx, torch.tensor([2, 1], device=DEVICE))
    assert cached_plan_count() == 1, "the second call must reuse the plan"
    del dst
    gc.collect()
    assert cached_plan_count() == 0, "the plan must go with its destination"
