"""Bad arguments, one table over every public function: fused_commit, conv_commit, ssm_commit, tail_copy.

The state tensors are checked once, where the plan is built (``kernels/descriptor.py``), and the index tensors
once, where a plan is launched (``kernels/state_commit.py``); the single-kind functions only adapt shapes. So
one case reads the same for every function it applies to: each function names its state and index
tensors by role (``dst``, ``src``, ``steps``, ``slots``), and a case changes one role and expects the
same error wherever that role exists.
"""

from tests.support.kernels import (  # noqa: I001  (sets TRITON_INTERPRET before triton loads)
    DEVICE,
    OTHER_DEVICE,
    conv_source,
    new_generator,
    rand,
)

import pytest
import torch

from sglang_mamba_dedup import kernels

L, R, D, K, N_SLOTS = 2, 5, 2, 4, 13
DIMS = (7, 5)  # two conv kinds in fused_commit
SSM_SHAPE = (3, 4, 5)
W = 7  # tail_copy's window


def _conv_pair(g, dim=DIMS[0]):
    src = conv_source("dedup", L, R, D, K, dim, torch.bfloat16, g)
    return torch.zeros((L, N_SLOTS, dim, K - 1), dtype=torch.bfloat16, device=DEVICE), src


def _ssm_pair(g):
    return torch.zeros((L, N_SLOTS, *SSM_SHAPE), device=DEVICE), rand((L, R, D, *SSM_SHAPE), torch.float32, g)


def _index(n=3):
    return torch.zeros(n, dtype=torch.int64, device=DEVICE)


def _fused(g):
    (d0, s0), (d1, s1) = _conv_pair(g), _conv_pair(g, DIMS[1])
    ssm_dst, ssm_src = _ssm_pair(g)
    idx = _index()
    return dict(
        conv_dsts=[d0, d1], conv_srcs=[s0, s1], ssm_dst=ssm_dst, ssm_src=ssm_src, accept_steps=idx, accept_slots=idx
    )


def _conv(g):
    dst, src = _conv_pair(g)
    return dict(conv_dst=dst, conv_src=src, accept_steps=_index(), accept_slots=_index())


def _ssm(g):
    dst, src = _ssm_pair(g)
    return dict(ssm_dst=dst, ssm_src=src, accept_steps=_index(), accept_slots=_index())


def _tail(g):
    i = _index(2)
    return dict(
        src=rand((3, 7, W), torch.float32, g),
        dst=torch.zeros((3, 7, W), device=DEVICE),
        src_blocks=i,
        dst_blocks=i,
        offsets=i,
    )


# function -> (valid arguments, role -> (argument name, list position or None))
FUNCTIONS = {
    "fused_commit": (_fused, {"dst": ("conv_dsts", 0), "src": ("conv_srcs", 0), "ssm_dst": ("ssm_dst", None)}),
    "conv_commit": (_conv, {"dst": ("conv_dst", None), "src": ("conv_src", None)}),
    "ssm_commit": (_ssm, {"dst": ("ssm_dst", None), "src": ("ssm_src", None), "ssm_dst": ("ssm_dst", None)}),
    "tail_copy": (
        _tail,
        {
            "dst": ("dst", None),
            "src": ("src", None),
            "steps": ("offsets", None),
            "slots": ("dst_blocks", None),
            "rows": ("src_blocks", None),
        },
    ),
}
INDEX_ROLES = {"steps": ("accept_steps", None), "slots": ("accept_slots", None)}
HAS_TRACK = ("fused_commit", "conv_commit", "ssm_commit")
ROW_LIMIT = HAS_TRACK  # tail_copy's source-row table lifts "no more rows than the source has"


class Args:
    """One function's arguments, read and written by role."""

    def __init__(self, name):
        make, roles = FUNCTIONS[name]
        self.kw = make(new_generator()[0])
        self.roles = {**INDEX_ROLES, **roles}

    def __getitem__(self, role):
        key, pos = self.roles[role]
        return self.kw[key] if pos is None else self.kw[key][pos]

    def __setitem__(self, role, value):
        key, pos = self.roles[role]
        if pos is None:
            self.kw[key] = value
        else:
            self.kw[key][pos] = value


def _to_other_device(t):
    return torch.empty(t.shape, dtype=t.dtype, device=OTHER_DEVICE)


def _not_dense(t):  # the same shape, its last two dims swapped in memory
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def _set(**roles):
    def change(a):
        for role, fn in roles.items():
            a[role] = fn(a[role])

    return change


def _kw(**values):
    def change(a):
        a.kw.update({k: v(a.kw) if callable(v) else v for k, v in values.items()})

    return change


def _track_half(a):
    a.kw["track_steps"] = a["steps"]


def _track_length(a):
    a.kw["track_steps"], a.kw["track_slots"] = a["steps"], a["slots"][:2]


def _too_many_rows(a):
    a["steps"] = a["slots"] = _index(R + 1)


ALL = tuple(FUNCTIONS)

# (case, functions it applies to, change, exception, match: one regex, or {function: regex})
CASES = [
    # the state tensors, checked where the plan is built
    ("state_dtype_pair", ALL, _set(dst=lambda t: t.half()), TypeError, r"is torch\.float16 but"),
    (
        "int_state",
        ALL,
        _set(dst=lambda t: t.to(torch.int32), src=lambda t: t.to(torch.int32)),
        TypeError,
        "not supported",
    ),
    ("state_shape", ALL, _set(dst=lambda t: t[..., :1]), ValueError, "state shape mismatch"),
    ("state_wrong_device", ALL, _set(src=_to_other_device), ValueError, "expected"),
    (
        "state_rank",
        ALL,
        _set(src=lambda t: t[0]),
        ValueError,
        {"tail_copy": r"\[blocks, dim, W\]", "*": "one more dim|at least 5 dims"},
    ),
    (
        "conv_rank",
        ("fused_commit", "conv_commit"),
        _set(dst=lambda t: t[..., None], src=lambda t: t[..., None]),
        ValueError,
        "must be 4-D",
    ),
    ("self_overlap", ALL, _set(dst=lambda t: t[:, :1].expand(t.shape)), ValueError, "overlaps itself"),
    ("ssm_not_dense", ("fused_commit", "ssm_commit"), _set(ssm_dst=_not_dense), ValueError, "dense"),
    (
        "tail_too_wide",
        ("tail_copy",),
        _kw(
            src=lambda kw: torch.zeros((3, 1, 4097), device=DEVICE),
            dst=lambda kw: torch.zeros((3, 1, 4097), device=DEVICE),
        ),
        ValueError,
        "at most 4096",
    ),
    ("list_length", ("fused_commit",), _kw(conv_srcs=lambda kw: kw["conv_srcs"][:1]), ValueError, "conv_dsts but"),
    ("ssm_half", ("fused_commit",), _kw(ssm_src=None), ValueError, "both be given"),
    (
        "nothing",
        ("fused_commit",),
        _kw(conv_dsts=(), conv_srcs=(), ssm_dst=None, ssm_src=None),
        ValueError,
        "nothing to commit",
    ),
    (
        "layers",
        ("fused_commit",),
        _kw(conv_dsts=lambda kw: [kw["conv_dsts"][0], kw["conv_dsts"][1][:1]]),
        ValueError,
        "layer count",
    ),
    ("slots", ("fused_commit",), _kw(ssm_dst=lambda kw: kw["ssm_dst"][:, :4]), ValueError, "slots, expected"),
    (
        "km1",
        ("fused_commit",),
        _kw(
            conv_dsts=lambda kw: [kw["conv_dsts"][0], kw["conv_dsts"][1][..., :1]],
            conv_srcs=lambda kw: [kw["conv_srcs"][0], kw["conv_srcs"][1][..., :1]],
        ),
        ValueError,
        "share K-1",
    ),
    ("steps_geom", ("fused_commit",), _kw(ssm_src=lambda kw: kw["ssm_src"][:, :, :1]), ValueError, "rows/steps"),
    # the index tensors, checked where a plan is launched
    ("index_float", ALL, _set(steps=lambda t: t.float()), TypeError, "int32 or int64"),
    ("index_int16", ALL, _set(slots=lambda t: t.to(torch.int16)), TypeError, "int32 or int64"),
    ("index_uint8", ALL, _set(steps=lambda t: t.to(torch.uint8)), TypeError, "int32 or int64"),
    ("index_2d", ALL, _set(steps=lambda t: t[None]), ValueError, "1-D"),
    ("index_not_tensor", ALL, _set(steps=lambda t: t.tolist()), TypeError, "torch.Tensor"),
    ("index_wrong_device", ALL, _set(slots=_to_other_device), ValueError, "expected"),
    ("index_length", ALL, _set(slots=lambda t: t[:1]), ValueError, "rows but accept_slots"),
    ("too_many_rows", ROW_LIMIT, _too_many_rows, ValueError, "source has only"),
    ("track_half", HAS_TRACK, _track_half, ValueError, "both be given"),
    ("track_length", HAS_TRACK, _track_length, ValueError, "rows but track_slots"),
    ("src_rows_float", ("tail_copy",), _set(rows=lambda t: t.float()), TypeError, "src_rows must be int32 or int64"),
    ("src_rows_length", ("tail_copy",), _set(rows=lambda t: t[:1]), ValueError, "source rows"),
]

PARAMS = [
    pytest.param(fn, change, exc, match if isinstance(match, str) else match.get(fn, match["*"]), id=f"{fn}-{case}")
    for case, fns, change, exc, match in CASES
    for fn in fns
]


@pytest.mark.parametrize("fn, change, exc, match", PARAMS)
def test_bad_arguments(fn, change, exc, match):
    args = Args(fn)
    change(args)
    with pytest.raises(exc, match=match):
        getattr(kernels, fn)(**args.kw)


def test_every_case_starts_from_valid_arguments():
    """Each function's valid arguments run: every failure above comes from the one change its case made."""
    for fn in FUNCTIONS:
        getattr(kernels, fn)(**Args(fn).kw)


# ---------------------------------------------------------------- launch(plan, ssm=...) against the plan's pair


def _zero_copy_plan(g):
    """A zero-copy plan with a track set (``accepted``, ``ssm_track_only``) and its states."""
    from sglang_mamba_dedup.kernels import state_commit

    conv_dst, conv_src = _conv_pair(g)
    ssm_dst, ssm_src = _ssm_pair(g)
    accepted = torch.zeros(R, dtype=torch.int32, device=DEVICE)
    plan = state_commit.get_plan([conv_dst], [conv_src], ssm_dst, ssm_src, accepted=accepted, ssm_track_only=True)
    return state_commit, plan, ssm_src, ssm_dst


@pytest.mark.parametrize(
    "pair",
    ["swapped", "other_pool", "other_dtype", "missing", "none_pair", "three"],
)
def test_launch_refuses_an_ssm_pair_that_is_not_the_plans(pair):
    """The plan holds the SSM pair's addresses and strides, the launch takes the tensors again: a pair that is not
    the plan's (swapped: the scratch overwritten from the pool; another pool or dtype: writes past its end, seen as
    a heap corruption that aborted the process) is refused in one line before anything runs."""
    g, _ = new_generator()
    state_commit, plan, src, dst = _zero_copy_plan(g)
    ssm = {
        "swapped": (dst, src),
        "other_pool": (src.clone(), torch.zeros((1, 2, *SSM_SHAPE), device=DEVICE)),
        "other_dtype": (src.double(), dst.double()),
        "missing": None,
        "none_pair": (None, None),
        "three": (src, dst, dst),
    }[pair]
    before = src.clone(), dst.clone()
    steps, slots = _index(2), torch.tensor([1, 2], dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="the plan's SSM pair"):
        state_commit.launch(plan, ssm=ssm, accept=(steps, slots), track=(steps, slots + 2), src_rows=_index(2) + 1)
    assert torch.equal(src, before[0]) and torch.equal(dst, before[1])


def test_launch_refuses_an_ssm_pair_on_a_plan_without_one():
    g, _ = new_generator()
    from sglang_mamba_dedup.kernels import state_commit

    conv_dst, conv_src = _conv_pair(g)
    ssm_dst, ssm_src = _ssm_pair(g)
    plan = state_commit.get_plan([conv_dst], [conv_src], None, None)
    with pytest.raises(ValueError, match="has no SSM pair"):
        state_commit.launch(plan, ssm=(ssm_src, ssm_dst), accept=(_index(2), _index(2)))
    assert state_commit.launch(plan, ssm=(None, None), accept=(_index(2), _index(2))) == "triton"


def test_odd_index_pairs_and_a_tail_plan_with_an_accepted_table_are_refused_in_one_line():
    """``accept`` / ``track`` that are not ``(steps, slots)`` pairs said "cannot unpack non-iterable NoneType" or "too
    many values to unpack"; a tail-mode plan (steps are column shifts) took an ``accepted`` table and stored shift + 1
    in it. Each refused naming what is wrong."""
    g, _ = new_generator()
    state_commit, plan, src, dst = _zero_copy_plan(g)
    two = (_index(2), _index(2))
    for kw, match in (
        (dict(accept=None), "accept must be a"),
        (dict(accept=(_index(2),)), "accept must be a"),
        (dict(accept=two, track=(*two, _index(2))), "track must be a"),
        (dict(accept=two, track=_index(3)), "track must be a"),
    ):
        with pytest.raises(ValueError, match=match):
            state_commit.launch(plan, ssm=(src, dst), src_rows=_index(2), **kw)
    conv_dst, conv_src = _conv_pair(g)
    with pytest.raises(ValueError, match="tail mode takes no accepted table"):
        state_commit.get_plan(
            [conv_dst], [conv_src], None, None, tail=True, accepted=torch.zeros(R, dtype=torch.int32, device=DEVICE)
        )
