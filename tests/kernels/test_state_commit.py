"""fused_commit: all layers, several conv kinds, SSM, accept and track in one launch.

Bit-exact against the reference and against SGLang 0.5.23's own kernels
(dense SSM scatter + conv window scatter / multi-pair conv scatter)."""

from tests.support.kernels import (  # noqa: I001  (sets TRITON_INTERPRET before triton loads)
    DEVICE,
    DTYPE_IDS,
    DTYPES,
    assert_bitwise_equal,
    assert_outside_view_untouched,
    bits,
    conv_source,
    make_index_set,
    new_generator,
    poison,
    rand,
    sglang_dense_scatter,
    sglang_module,
    sglang_window_scatter,
    strided_dst,
)

import sys

import pytest

import torch

from sglang_mamba_dedup.kernels import cached_plan_count, clear_plan_cache, fused_commit
from sglang_mamba_dedup.kernels.descriptor import get_plan
from tests.support.reference import fused_commit_reference

L, R, N_SLOTS = 2, 5, 13
DIMS = (7, 5)  # two conv kinds, odd dims
SSM_SHAPE = (3, 4, 5)
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _case(D, K, src_kind, conv_dtype, ssm_dtype, g, track, idx_dtype=torch.int64, strided=False, n_conv=2):
    conv_srcs = [conv_source(src_kind, L, R, D, K, dim, conv_dtype, g) for dim in DIMS[:n_conv]]
    if strided:
        pairs = [strided_dst((L, N_SLOTS, dim, K - 1), conv_dtype) for dim in DIMS[:n_conv]]
        big = poison(torch.empty((L + 1, N_SLOTS + 3, *SSM_SHAPE), dtype=ssm_dtype, device=DEVICE))
        ssm_dst, ssm_big = big[1:, 3:], big
    else:
        pairs = [
            (poison(torch.empty((L, N_SLOTS, dim, K - 1), dtype=conv_dtype, device=DEVICE)), None)
            for dim in DIMS[:n_conv]
        ]
        ssm_dst = poison(torch.empty((L, N_SLOTS, *SSM_SHAPE), dtype=ssm_dtype, device=DEVICE))
        ssm_big = None
    steps, slots = make_index_set(R, D, N_SLOTS, g, idx_dtype=idx_dtype)
    kw = dict(
        conv_dsts=[p[0] for p in pairs],
        conv_srcs=conv_srcs,
        ssm_dst=ssm_dst,
        ssm_src=rand((L, R, D, *SSM_SHAPE), ssm_dtype, g),
        accept_steps=steps,
        accept_slots=slots,
    )
    if track:
        t_steps, t_slots = make_index_set(R, D, N_SLOTS, g, idx_dtype=idx_dtype, skip_every=2, taken=slots.tolist())
        kw.update(track_steps=t_steps, track_slots=t_slots)
    bigs = [p[1] for p in pairs] + [ssm_big]
    return kw, bigs


def _expected(kw):
    exp = dict(kw, conv_dsts=[d.clone() for d in kw["conv_dsts"]], ssm_dst=kw["ssm_dst"].clone())
    fused_commit_reference(**exp)
    return exp


def _check(kw, exp, msg):
    for i, (got, want) in enumerate(zip(kw["conv_dsts"], exp["conv_dsts"])):
        assert_bitwise_equal(got, want, f"{msg} conv kind {i}")
    assert_bitwise_equal(kw["ssm_dst"], exp["ssm_dst"], f"{msg} ssm")


@pytest.mark.parametrize("track", [False, True], ids=["accept", "accept+track"])
@pytest.mark.parametrize("src_kind", ["dedup", "dense"])
@pytest.mark.parametrize("K", [2, 3, 4], ids=lambda k: f"K{k}")
@pytest.mark.parametrize("D", [1, 2, 4, 8], ids=lambda d: f"D{d}")
def test_fused_commit_matches_reference_and_sglang(D, K, src_kind, track):
    g, seed = new_generator()
    kw, _ = _case(D, K, src_kind, torch.bfloat16, torch.float32, g, track)
    exp = _expected(kw)
    fused_commit(**kw)
    _check(kw, exp, f"seed={seed} vs reference")

    # SGLang 0.5.23 kernels on fresh poisoned destinations, same sources and indices
    sets = [(kw["accept_slots"], kw["accept_steps"])]
    if track:
        sets.append((kw["track_slots"], kw["track_steps"]))
    ssm_theirs = poison(torch.empty_like(kw["ssm_dst"]))
    conv_theirs = [poison(torch.empty_like(d)) for d in kw["conv_dsts"]]
    for slots, steps in sets:
        sglang_dense_scatter(ssm_theirs, kw["ssm_src"], slots, steps)
        for dst, src in zip(conv_theirs, kw["conv_srcs"]):
            (sglang_window_scatter if src_kind == "dedup" else sglang_dense_scatter)(dst, src, slots, steps)
    assert_bitwise_equal(kw["ssm_dst"], ssm_theirs, f"seed={seed} ssm vs SGLang 0.5.23")
    for i, (ours, theirs) in enumerate(zip(kw["conv_dsts"], conv_theirs)):
        assert_bitwise_equal(ours, theirs, f"seed={seed} conv kind {i} vs SGLang 0.5.23")


@pytest.mark.parametrize("track", [False, True], ids=["accept", "accept+track"])
def test_fused_commit_matches_sglang_multi_pair_kernel(track):
    """SGLang's single-launch multi-pair conv scatter (bf16 only, dense dst entries)."""
    m = sglang_module()
    if not hasattr(m, "fused_conv_window_scatter_multi"):
        pytest.skip("this SGLang has no multi-pair conv scatter")
    g, seed = new_generator()
    kw, _ = _case(4, 4, "dedup", torch.bfloat16, torch.float32, g, track)
    fused_commit(**kw)
    theirs = [poison(torch.empty_like(d)) for d in kw["conv_dsts"]]
    m.fused_conv_window_scatter_multi(
        list(zip(theirs, kw["conv_srcs"])),
        kw["accept_slots"],
        kw["accept_steps"],
        kw.get("track_slots"),
        kw.get("track_steps"),
    )
    for i, (ours, t) in enumerate(zip(kw["conv_dsts"], theirs)):
        assert_bitwise_equal(ours, t, f"seed={seed} conv kind {i} vs SGLang multi-pair kernel")


@pytest.mark.parametrize("track", [False, True], ids=["accept", "accept+track"])
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64], ids=lambda t: DTYPE_IDS[t])
@pytest.mark.parametrize("ssm_dtype", DTYPES, ids=lambda t: "ssm-" + DTYPE_IDS[t])
@pytest.mark.parametrize("conv_dtype", DTYPES, ids=lambda t: "conv-" + DTYPE_IDS[t])
def test_fused_commit_dtypes_strided_destinations(conv_dtype, ssm_dtype, idx_dtype, track):
    g, seed = new_generator()
    kw, bigs = _case(4, 4, "dedup", conv_dtype, ssm_dtype, g, track, idx_dtype=idx_dtype, strided=True)
    befores = [b.clone() for b in bigs]
    exp = _expected(kw)
    fused_commit(**kw)
    _check(kw, exp, f"seed={seed}")
    views = kw["conv_dsts"] + [kw["ssm_dst"]]
    for view, big, before in zip(views, bigs, befores):
        assert_outside_view_untouched(view, big, before, f"seed={seed}")


@pytest.mark.parametrize("part", ["conv_only", "ssm_only", "one_conv_kind"])
def test_fused_commit_partial(part):
    g, seed = new_generator()
    kw, _ = _case(3, 3, "dedup", torch.float16, torch.float32, g, True, n_conv=1 if part == "one_conv_kind" else 2)
    if part == "conv_only":
        kw.update(ssm_dst=None, ssm_src=None)
    elif part == "ssm_only":
        kw.update(conv_dsts=[], conv_srcs=[])
    exp = dict(
        kw,
        conv_dsts=[d.clone() for d in kw["conv_dsts"]],
        ssm_dst=None if kw["ssm_dst"] is None else kw["ssm_dst"].clone(),
    )
    fused_commit_reference(**exp)
    fused_commit(**kw)
    for got, want in zip(kw["conv_dsts"], exp["conv_dsts"]):
        assert_bitwise_equal(got, want, f"seed={seed}")
    if kw["ssm_dst"] is not None:
        assert_bitwise_equal(kw["ssm_dst"], exp["ssm_dst"], f"seed={seed}")


def test_fused_commit_duplicate_destinations():
    """Defined behaviour: each element of a contended slot holds the bytes of one of the
    contending rows; identical sources therefore give an exact result."""
    g, seed = new_generator()
    kw, _ = _case(4, 4, "dense", torch.bfloat16, torch.float32, g, True)
    kw["accept_steps"] = torch.tensor([0, 1, 2, 3, 0], device=DEVICE)
    kw["accept_slots"] = torch.tensor([4, 4, 7, 8, 9], device=DEVICE)  # rows 0 and 1 collide
    kw["track_steps"] = torch.tensor([-1, -1, 2, -1, 3], device=DEVICE)
    kw["track_slots"] = torch.tensor([1, 2, 7, 3, 10], device=DEVICE)  # track row 2 collides with accept row 2
    fused_commit(**kw)
    for dst, src in [*zip(kw["conv_dsts"], kw["conv_srcs"]), (kw["ssm_dst"], kw["ssm_src"])]:
        got = bits(dst[:, 4])
        cand = (bits(src[:, 0, 0].contiguous()), bits(src[:, 1, 1].contiguous()))
        assert ((got == cand[0]) | (got == cand[1])).all(), f"seed={seed}: element from neither contender"
        # accept row 2 and track row 2 both copy source row 2 step 2: identical bytes, exact
        assert torch.equal(bits(dst[:, 7]), bits(src[:, 2, 2].contiguous())), f"seed={seed}"


def test_fused_commit_plan_cache_follows_tensors():
    """A cached descriptor table must never be reused for different tensors."""
    g, seed = new_generator()
    clear_plan_cache()
    for _ in range(2):
        kw, _ = _case(2, 3, "dedup", torch.bfloat16, torch.float32, g, False)
        exp = _expected(kw)
        fused_commit(**kw)
        _check(kw, exp, f"seed={seed}")
        steps, slots = make_index_set(R, 2, N_SLOTS, g)
        kw.update(accept_steps=steps, accept_slots=slots)
        exp = _expected(kw)
        fused_commit(**kw)  # same states, new indices: cached plan
        _check(kw, exp, f"seed={seed} second call")


# ---------------------------------------------------------------- GPU only


@CUDA
def test_fused_commit_cuda_graph_capture_and_replay():
    g, seed = new_generator()
    kw, _ = _case(4, 4, "dedup", torch.bfloat16, torch.float32, g, True)
    fused_commit(**kw)  # warm-up outside capture: compiles and caches the plan
    for d in kw["conv_dsts"]:
        poison(d)
    poison(kw["ssm_dst"])
    idx_names = ("accept_steps", "accept_slots", "track_steps", "track_slots")
    static = {k: kw[k].clone() for k in idx_names}
    kw.update(static)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        fused_commit(**kw)
    torch.cuda.current_stream().wait_stream(stream)
    for trial in range(3):
        for d in kw["conv_dsts"]:
            poison(d)
        poison(kw["ssm_dst"])
        steps, slots = make_index_set(R, 4, N_SLOTS, g)
        t_steps, t_slots = make_index_set(R, 4, N_SLOTS, g, skip_every=2, taken=slots.tolist())
        for name, new in zip(idx_names, (steps, slots, t_steps, t_slots)):
            static[name].copy_(new)
        exp = _expected(kw)
        graph.replay()
        torch.cuda.synchronize()
        _check(kw, exp, f"seed={seed} replay {trial}")


@CUDA
def test_fused_commit_int64_offsets_past_2_31():
    """Destinations whose element offsets pass 2**31 (layer and slot strides in int64)."""
    free = torch.cuda.mem_get_info()[0]
    if free < 24 * 2**30:
        pytest.skip("needs ~20 GiB of free GPU memory")
    g, seed = new_generator()
    L2, R2, D2, dim, K = 2, 3, 4, 6144, 4
    per = 1 << 20  # fp32 SSM entry of 4 MiB
    n_slots = 1100  # 2 * 1100 * 2**20 elements = 2.3e9 > 2**31
    ssm_dst = torch.full((L2, n_slots, per), 7.0, device="cuda")
    ssm_src = rand((L2, R2, D2, per), torch.float32, g, "cuda")
    conv_phys_big = torch.full((L2, 120_000, dim, K - 1), 3.0, dtype=torch.bfloat16, device="cuda")  # 4.4e9 elems
    conv_src = conv_source("dedup", L2, R2, D2, K, dim, torch.bfloat16, g, "cuda")
    steps = torch.tensor([3, 1, 2], device="cuda")
    slots = torch.tensor([n_slots - 1, 5, n_slots - 2], device="cuda")
    conv_slots = torch.tensor([119_999, 5, 119_998], device="cuda")
    # conv and SSM share the index set, so use a second call for the conv slots past 2**31
    fused_commit(conv_dsts=[], conv_srcs=[], ssm_dst=ssm_dst, ssm_src=ssm_src, accept_steps=steps, accept_slots=slots)
    fused_commit(
        conv_dsts=[conv_phys_big],
        conv_srcs=[conv_src],
        ssm_dst=None,
        ssm_src=None,
        accept_steps=steps,
        accept_slots=conv_slots,
    )
    torch.cuda.synchronize()
    assert (L2 * n_slots * per) > 2**31 and conv_phys_big.numel() > 2**32
    for r, (s, slot, cslot) in enumerate(zip(steps.tolist(), slots.tolist(), conv_slots.tolist())):
        for layer in range(L2):
            assert torch.equal(bits(ssm_dst[layer, slot]), bits(ssm_src[layer, r, s])), f"seed={seed}"
            assert torch.equal(bits(conv_phys_big[layer, cslot]), bits(conv_src[layer, r, s].contiguous()))
    # neighbours untouched
    assert (ssm_dst[:, n_slots - 3] == 7.0).all() and (conv_phys_big[:, 119_997] == 3.0).all()
    assert (ssm_dst[:, 0] == 7.0).all() and (conv_phys_big[:, 0] == 3.0).all()


@pytest.mark.parametrize("tile_bytes", [16, 64, 1 << 16], ids=["tiles-even", "tiles-ragged", "one-tile"])
def test_fused_commit_ssm_tilings(monkeypatch, tile_bytes):
    """Several SSM tiles per entry, with and without a ragged last tile, and one tile."""
    import importlib

    common = importlib.import_module("sglang_mamba_dedup.kernels._validate")
    monkeypatch.setattr(common, "SSM_TILE_BYTES", tile_bytes)
    clear_plan_cache()
    g, seed = new_generator()
    kw, _ = _case(2, 4, "dedup", torch.bfloat16, torch.float32, g, True)
    exp = _expected(kw)
    fused_commit(**kw)
    _check(kw, exp, f"seed={seed} tile={tile_bytes}")
    assert cached_plan_count() == 1
    plan = _plan_of(kw)
    n_ssm_tiles = plan.tiles - plan.conv_tiles
    assert n_ssm_tiles == max(1, -(-60 * 4 // tile_bytes)), n_ssm_tiles  # 60 fp32 elements per entry
    clear_plan_cache()


@pytest.mark.parametrize("change", ["transpose_", "as_strided_", "set_"])
def test_fused_commit_plan_follows_in_place_layout_changes(change):
    """A state tensor whose strides, offset or storage change in place (same Python object)
    gets a fresh plan: the cached one would write through the old pointers and strides."""
    g, seed = new_generator()
    clear_plan_cache()
    K = 4
    dim = K - 1  # square [dim, K-1] windows: transpose_(2, 3) keeps the shape, swaps the strides
    conv_srcs = [conv_source("dedup", L, R, 2, K, dim, torch.bfloat16, g)]
    conv_big = poison(torch.empty((L, N_SLOTS + 1, dim, K - 1), dtype=torch.bfloat16, device=DEVICE))
    conv_dst = conv_big[:, 1:]
    ssm_dst = poison(torch.empty((L, N_SLOTS, *SSM_SHAPE), dtype=torch.float32, device=DEVICE))
    kw = dict(
        conv_dsts=[conv_dst],
        conv_srcs=conv_srcs,
        ssm_dst=ssm_dst,
        ssm_src=rand((L, R, 2, *SSM_SHAPE), torch.float32, g),
    )
    kw["accept_steps"], kw["accept_slots"] = make_index_set(R, 2, N_SLOTS, g)
    exp = _expected(kw)
    fused_commit(**kw)  # builds and caches the plan
    _check(kw, exp, f"seed={seed} first call")

    if change == "transpose_":
        conv_dst.transpose_(2, 3)
    elif change == "as_strided_":  # one slot lower in the same buffer: same strides, another data_ptr
        conv_dst.as_strided_(conv_dst.shape, conv_dst.stride(), conv_big.storage_offset())
    else:  # a fresh storage under the same tensor object
        ssm_dst.set_(torch.empty_like(ssm_dst))
    poison(conv_big)
    poison(ssm_dst)
    kw["accept_steps"], kw["accept_slots"] = make_index_set(R, 2, N_SLOTS, g)
    exp = _expected(kw)
    fused_commit(**kw)
    _check(kw, exp, f"seed={seed} after {change} (a stale plan writes through the old layout)")
    clear_plan_cache()


def test_fused_commit_descriptor_table_columns():
    """The descriptor table holds each conv kind's pointers, dim, strides and first tile in its named columns."""
    import importlib

    fc = importlib.import_module("sglang_mamba_dedup.kernels.descriptor")
    g, seed = new_generator()
    clear_plan_cache()
    kw, _ = _case(2, 4, "dedup", torch.bfloat16, torch.float32, g, False, strided=True)
    fused_commit(**kw)
    assert cached_plan_count() == 1
    plan = _plan_of(kw)
    meta = plan.meta.cpu().tolist()
    assert len(meta) == len(kw["conv_dsts"]) + 1 and all(len(row) == fc.META_COLS.value for row in meta)
    tile = 0
    for row, dst, src in zip(meta, kw["conv_dsts"], kw["conv_srcs"]):
        assert row[fc.COL_SRC_PTR] == src.data_ptr() and row[fc.COL_DST_PTR] == dst.data_ptr()
        assert row[fc.COL_DIM] == dst.shape[2]
        src_cols = (fc.COL_SRC_L, fc.COL_SRC_R, fc.COL_SRC_T, fc.COL_SRC_D, fc.COL_SRC_W)
        dst_cols = (fc.COL_DST_L, fc.COL_DST_S, fc.COL_DST_D, fc.COL_DST_W)
        assert tuple(row[c] for c in src_cols) == src.stride(), f"seed={seed}"
        assert tuple(row[c] for c in dst_cols) == dst.stride(), f"seed={seed}"
        assert row[fc.COL_TILE0] == tile
        tile += -(-dst.shape[2] * dst.shape[3] // fc.launch_config("conv")[0])
    assert meta[-1][fc.COL_TILE0] == tile == plan.conv_tiles
    clear_plan_cache()


def _plan_of(kw):
    """The cached plan of ``kw``'s state tensors (a cache hit after a call with them)."""
    return get_plan(kw["conv_dsts"], kw["conv_srcs"], kw["ssm_dst"], kw["ssm_src"])


def test_fused_commit_plan_lives_with_its_destination_and_holds_no_state():
    """The cache keeps a plan as long as its first destination tensor lives, reuses it on the next call,
    and holds no reference to any state tensor: dropping the tensors drops the plan."""
    import gc
    import weakref

    g, seed = new_generator()
    clear_plan_cache()
    kw, _ = _case(2, 3, "dedup", torch.bfloat16, torch.float32, g, True)
    fused_commit(**kw)
    assert cached_plan_count() == 1
    plan = _plan_of(kw)
    # new accept slots, apart from the track slots (a shared slot would race: see kernels/_validate.py)
    kw["accept_steps"], kw["accept_slots"] = make_index_set(R, 2, N_SLOTS, g, taken=kw["track_slots"].tolist())
    exp = _expected(kw)
    fused_commit(**kw)
    _check(kw, exp, f"seed={seed} second call")
    assert cached_plan_count() == 1 and _plan_of(kw) is plan, "the second call must reuse the cached plan"
    gone = [weakref.ref(t) for t in (*kw["conv_dsts"], *kw["conv_srcs"], kw["ssm_dst"], kw["ssm_src"])]
    del kw, exp
    gc.collect()
    assert all(r() is None for r in gone), "a cached plan keeps a state tensor alive"
    assert cached_plan_count() == 0, "the plan outlived its destination tensor"
    clear_plan_cache()


def test_direct_launch_refuses_calls_it_was_not_built_for(monkeypatch):
    """The direct launcher launches only what Triton would launch with the same compiled kernel."""
    import importlib

    dl = importlib.import_module("sglang_mamba_dedup.kernels._direct_launch")
    launched = []
    d = dl.DirectLaunch.__new__(dl.DirectLaunch)
    d.run = lambda *a: launched.append(a)
    d.function, d.metadata, d.head, d.tail = "fn", "md", (1, 2, 3), (7, 8)
    d.dtypes, d.aligned, d.device_index, d.stream_of = (torch.int64,) * 5, (True,) * 5, 0, lambda dev: 99
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(dl, "launch_hooks_set", lambda kernel=None: False)
    base = torch.zeros(8, dtype=torch.int64)
    idx = (base[:2],) * 5
    assert d.launch((4, 2, 2), idx, 2) and launched[-1][:9] == (4, 2, 2, 99, "fn", "md", None, None, None)
    assert launched[-1][9:] == (1, 2, 3, *(t.data_ptr() for t in idx), 2, 7, 8)
    n = len(launched)
    assert not d.launch((4, 2, 2), (base[:2].int(),) + idx[1:], 2), "another index dtype compiles another kernel"
    assert not d.launch((4, 2, 2), (base[1:3],) + idx[1:], 2), "another alignment compiles another kernel"
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert not d.launch((4, 2, 2), idx, 2), "another device"
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(dl, "launch_hooks_set", lambda kernel=None: True)
    assert not d.launch((4, 2, 2), idx, 2), "a profiler's launch hook must see the launch"
    assert len(launched) == n


def _aligned_and_not(n: int):
    """Two int64 index views of ``n`` elements: one 16-byte aligned, one 8 bytes past a boundary."""
    buf = torch.zeros(2 * n + 4, dtype=torch.int64)
    off = (-buf.data_ptr() % 16) // 8  # elements to the first 16-byte boundary
    return buf[off : off + n], buf[off + 1 : off + 1 + n]


def test_direct_launch_built_from_a_mocked_compiled_kernel_falls_back_per_pointer(monkeypatch):
    """``_DirectLaunch.build`` with a mocked compiled kernel and binder (no GPU): the launcher it builds
    keys on each index pointer's own 16-byte alignment, as Triton specialises. Built with the pattern
    [D, -, D, -, D], a call with [-, D, -, D, -] (every pointer still aligned or not as a set, the old
    one-bit key said 'same') must fall back to Triton's launch, and commit.launch must count it so."""
    import importlib
    import types

    import triton.runtime as trt

    dl = importlib.import_module("sglang_mamba_dedup.kernels._direct_launch")
    al, mis = _aligned_and_not(2)
    first = (al, mis, al, mis, al)
    args = (torch.zeros(1), torch.zeros(1), torch.zeros(1), *first, 2, 5, 6)
    kw = {"NUM_CONV": 1}
    names = ["meta", "ssm_src", "ssm_dst", "a", "b", "c", "d", "e", "n_acc", "x", "y", "NUM_CONV"]

    def binder(*a, **k):  # Triton's binder: the bound arguments in signature order
        return dict(zip(names, list(a) + [k[n] for n in names[len(a) :]])), None, None

    fake_kernel = types.SimpleNamespace(device_caches={0: (None, None, None, None, binder)}, arg_names=names)
    fake_driver = types.SimpleNamespace(
        active=types.SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda dev: 77)
    )
    monkeypatch.setattr(trt, "driver", fake_driver)
    launched = []
    compiled = types.SimpleNamespace(run=lambda *a: launched.append(a), function="fn", packed_metadata="md")
    d = dl.DirectLaunch.build(fake_kernel, compiled, args, kw, 5)
    assert isinstance(d, dl.DirectLaunch) and d.aligned == (True, False, True, False, True)

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(dl, "launch_hooks_set", lambda kernel=None: False)
    assert d.launch((1, 1, 2), first, 2)
    assert launched[-1][3] == 77 and launched[-1][9 + 3 : 9 + 8] == tuple(t.data_ptr() for t in first)
    swapped = (mis, al, mis, al, mis)
    assert not d.launch((1, 1, 2), swapped, 2), "another per-pointer alignment compiles another kernel"
    assert len(launched) == 1

    # a binder that binds differently (e.g. another Triton): no direct launcher at all, Triton's path only
    def other_binder(*a, **k):
        bound, _, _ = binder(*a, **k)
        return dict(bound, x=-1), None, None

    fake_kernel.device_caches = {0: (None, None, None, None, other_binder)}
    assert dl.DirectLaunch.build(fake_kernel, compiled, args, kw, 5) is None


@CUDA
def test_fused_commit_direct_launch_is_used_and_exact(monkeypatch):
    """After the first launch compiles the kernel, later calls launch it directly (Triton's JIT path is
    not entered: here it would raise); calls it was not built for (another index dtype, a misaligned
    index tensor) go through Triton again.  Every result bit-exact against the reference."""
    import importlib

    fc = importlib.import_module("sglang_mamba_dedup.kernels.state_commit")
    g, seed = new_generator()
    clear_plan_cache()
    direct_launches = 0
    for track in (False, True):
        kw, _ = _case(3, 4, "dedup", torch.bfloat16, torch.float32, g, track)
        exp = _expected(kw)
        assert fused_commit(**kw) == "triton"  # Triton's path: compiles, then builds the direct launcher
        _check(kw, exp, f"seed={seed} first call")
        plan = _plan_of(kw)
        assert isinstance(plan.direct[(track, False)], fc.DirectLaunch), plan.direct
        jit = fc._fused_commit_kernel

        class _NoJit:
            def __getitem__(self, grid):
                raise AssertionError("Triton's launch path was entered")

        monkeypatch.setattr(fc, "_fused_commit_kernel", _NoJit())
        for trial in range(3):
            for t in (*kw["conv_dsts"], kw["ssm_dst"]):
                poison(t)
            kw["accept_steps"], kw["accept_slots"] = make_index_set(R, 3, N_SLOTS, g)
            if track:
                kw["track_steps"], kw["track_slots"] = make_index_set(
                    R, 3, N_SLOTS, g, skip_every=2, taken=kw["accept_slots"].tolist()
                )
            exp = _expected(kw)
            assert fused_commit(**kw) == "direct", "the call did not take the direct launch"
            direct_launches += 1
            _check(kw, exp, f"seed={seed} direct call {trial} track={track}")
        monkeypatch.setattr(fc, "_fused_commit_kernel", jit)
        # a misaligned accept_slots (4 bytes past a 16-byte boundary) and int32 steps: Triton's path again
        slots64 = kw["accept_slots"]
        padded = torch.empty(slots64.numel() + 1, dtype=slots64.dtype, device=DEVICE)
        padded[1:] = slots64
        kw["accept_slots"] = padded[1:]
        kw["accept_steps"] = kw["accept_steps"].to(torch.int32)
        for t in (*kw["conv_dsts"], kw["ssm_dst"]):
            poison(t)
        exp = _expected(kw)
        assert fused_commit(**kw) == "triton", "a call the launcher was not built for went direct"
        _check(kw, exp, f"seed={seed} misaligned/int32 indices track={track}")
    clear_plan_cache()
    # the GPU recipe (tools/gpu-engine/run_bench.sh) fails when this line is missing or shows 0
    print(f"\n[direct launches: {direct_launches}]", file=sys.__stdout__, flush=True)


@pytest.mark.parametrize("which", ["conv_slot_stride_0", "ssm_slots_alias"])
def test_fused_commit_rejects_self_overlapping_destination(which):
    """Two rows committed to 'different' slots that share memory would race: refused before any write."""
    g, seed = new_generator()
    kw, _ = _case(3, 4, "dedup", torch.float32, torch.float32, g, False)
    if which == "conv_slot_stride_0":  # every slot of conv kind 0 is the same memory
        d = kw["conv_dsts"][0]
        kw["conv_dsts"][0] = d[:, :1].expand(d.shape)
    else:  # slot s + 1 starts half-way into slot s
        d = kw["ssm_dst"]
        inner = d[0, 0].numel()
        flat = torch.zeros(d.shape[0] * d.shape[1] * inner, dtype=d.dtype, device=d.device)
        kw["ssm_dst"] = flat.as_strided(d.shape, (d.shape[1] * inner // 2 + inner, inner // 2, *d.stride()[2:]))
    with pytest.raises(ValueError, match="overlaps itself"):
        fused_commit(**kw)


@pytest.mark.parametrize("knob", ["none", "debug", "instrumentation", "stages_hook", "launch_hook"])
def test_direct_launch_steps_aside_for_triton_options(monkeypatch, knob):
    """Options Triton applies per call (debug, instrumentation, inspection and launch hooks) send the
    launch through Triton: the direct path would silently skip them."""
    import importlib

    import triton

    dl = importlib.import_module("sglang_mamba_dedup.kernels._direct_launch")
    rt, comp = triton.knobs.runtime, triton.knobs.compilation
    monkeypatch.setattr(rt, "debug", knob == "debug")
    monkeypatch.setattr(comp, "instrumentation_mode", "fpsan" if knob == "instrumentation" else "")
    monkeypatch.setattr(rt, "add_stages_inspection_hook", (lambda: ("k", "h")) if knob == "stages_hook" else None)
    if knob == "launch_hook":
        monkeypatch.setattr(rt, "launch_enter_hook", lambda *a: None)
    assert dl.launch_hooks_set() == (knob != "none")


@pytest.mark.parametrize("ssm_dtype", [torch.float32, torch.bfloat16], ids=lambda t: "ssm-" + DTYPE_IDS[t])
def test_fused_commit_mamba2_nemotron_h_layer(ssm_dtype):
    """One layer of Nemotron-H-8B's TP2 rank (shape table: conv dim 5120, SSM 64x64x128, head_dim != state), fp32 and
    bf16 SSM, D=4, K=4, dedup windows, accept + track: bit-exact vs the reference and SGLang's own kernels."""
    from sglang_mamba_dedup.offline.shapes import NEMOTRON_H_8B_TP2 as s

    g, seed = new_generator()
    n_l, n_r, n_slots, d, k = 1, 2, 5, 4, s.conv_kernel
    conv_src = conv_source("dedup", n_l, n_r, d, k, s.conv_dim, torch.bfloat16, g)
    steps, slots = make_index_set(n_r, d, n_slots, g)
    t_steps, t_slots = make_index_set(n_r, d, n_slots, g, skip_every=2, taken=slots.tolist())
    kw = dict(
        conv_dsts=[poison(torch.empty((n_l, n_slots, s.conv_dim, k - 1), dtype=torch.bfloat16, device=DEVICE))],
        conv_srcs=[conv_src],
        ssm_dst=poison(torch.empty((n_l, n_slots, *s.ssm_shape), dtype=ssm_dtype, device=DEVICE)),
        ssm_src=rand((n_l, n_r, d, *s.ssm_shape), ssm_dtype, g),
        accept_steps=steps,
        accept_slots=slots,
        track_steps=t_steps,
        track_slots=t_slots,
    )
    exp = _expected(kw)
    fused_commit(**kw)
    _check(kw, exp, f"seed={seed} vs reference")
    ssm_theirs = poison(torch.empty_like(kw["ssm_dst"]))
    conv_theirs = poison(torch.empty_like(kw["conv_dsts"][0]))
    for sl, st in ((slots, steps), (t_slots, t_steps)):
        sglang_dense_scatter(ssm_theirs, kw["ssm_src"], sl, st)
        sglang_window_scatter(conv_theirs, conv_src, sl, st)
    assert_bitwise_equal(kw["ssm_dst"], ssm_theirs, f"seed={seed} ssm vs SGLang")
    assert_bitwise_equal(kw["conv_dsts"][0], conv_theirs, f"seed={seed} conv vs SGLang")
