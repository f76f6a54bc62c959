"""The patch machinery: idempotent apply, exact revert, all-or-nothing features, ours-vs-theirs."""

import sys
import types

import pytest
import wrapt

from sglang_mamba_dedup import installed, patcher
from sglang_mamba_dedup.patcher import Patch, Patcher, is_ours
from sglang_mamba_dedup.patches import PATCHES, SWITCHED_FEATURES

pytestmark = pytest.mark.release

SUPPORTED_FAKE = "0.5.23"


@pytest.fixture
def fake_module():
    """A module with a class, a staticmethod, a classmethod and a function to patch."""
    mod = types.ModuleType("smd_fake_target")

    class Pool:
        def __init__(self, size, device="cpu"):
            self.size = size

        @staticmethod
        def build(parser):
            return ["built", parser]

        @classmethod
        def make(cls, args):
            return (cls, args)

    def commit(steps, slots):
        return ("stock", steps, slots)

    mod.Pool = Pool
    mod.commit = commit
    sys.modules[mod.__name__] = mod
    yield mod
    del sys.modules[mod.__name__]


def _tag(tag):
    def wrapper(wrapped, instance, args, kwargs):
        result = wrapped(*args, **kwargs)
        return (tag, result)

    return wrapper


def _table(feature="f", **overrides):
    base = dict(module="smd_fake_target", releases=">=0.5.12,<0.5.24", feature=feature)
    return [
        Patch(name="fn", attr="commit", wrapper=_tag("ours"), params=("steps", "slots"), **base),
        Patch(name="static", attr="Pool.build", wrapper=_tag("ours"), params=("parser",), **base),
        Patch(name="cls", attr="Pool.make", wrapper=_tag("ours"), params=("args",), **base),
        Patch(name="init", attr="Pool.__init__", wrapper=lambda w, i, a, k: w(*a, **k), params=("size",), **base),
    ]


def _raw(mod):
    return {
        "fn": mod.commit,
        "static": vars(mod.Pool)["build"],
        "cls": vars(mod.Pool)["make"],
        "init": vars(mod.Pool)["__init__"],
    }


def test_apply_wraps_every_kind_of_target_and_revert_restores_identity(fake_module):
    before = _raw(fake_module)
    p = Patcher(_table(), version_getter=lambda: SUPPORTED_FAKE)
    assert p.apply() == {"f": None}
    after = _raw(fake_module)
    for name, obj in after.items():
        assert isinstance(obj, wrapt.FunctionWrapper) and is_ours(obj, name), name
    # the wrappers really run, bound correctly for function / staticmethod / classmethod
    assert fake_module.commit(1, 2) == ("ours", ("stock", 1, 2))
    assert fake_module.Pool.build("p") == ("ours", ["built", "p"])
    assert fake_module.Pool.make("a") == ("ours", (fake_module.Pool, "a"))
    assert fake_module.Pool(3).size == 3
    assert p.calls("fn") == 1 and p.calls("init") == 1
    p.revert()
    assert all(_raw(fake_module)[k] is before[k] for k in before)
    assert {s["state"] for s in p.status().values()} == {"reverted"}


def test_apply_twice_is_apply_once_and_revert_twice_is_harmless(fake_module):
    p = Patcher(_table(), version_getter=lambda: SUPPORTED_FAKE)
    p.apply()
    first = _raw(fake_module)
    p.apply()
    assert all(_raw(fake_module)[k] is first[k] for k in first), "second apply wrapped again"
    assert fake_module.commit(1, 2) == ("ours", ("stock", 1, 2)), "double wrapping would nest the tag"
    orig = {k: v.__wrapped__ if k == "fn" else None for k, v in first.items()}
    p.revert()
    p.revert()
    assert fake_module.commit is orig["fn"]


def test_missing_target_skips_the_whole_feature(fake_module):
    table = _table() + [
        Patch(
            name="gone",
            feature="f",
            module="smd_fake_target",
            attr="Pool.vanished",
            releases=">=0.5.12,<0.5.24",
            wrapper=_tag("x"),
        )
    ]
    before = _raw(fake_module)
    p = Patcher(table, version_getter=lambda: SUPPORTED_FAKE)
    reason = p.apply()["f"]
    assert reason and "Pool.vanished" in reason and "nothing wrapped" in reason
    assert all(_raw(fake_module)[k] is before[k] for k in before), "feature was half-patched"
    st = p.status()
    assert {s["state"] for s in st.values()} == {"skipped"}
    assert "not defined on Pool" in st["gone"]["reason"]


def test_changed_signature_skips_the_feature(fake_module):
    table = [
        Patch(
            name="fn",
            feature="f",
            module="smd_fake_target",
            attr="commit",
            releases=">=0.5.12,<0.5.24",
            wrapper=_tag("x"),
            params=("steps", "track_slots"),
        )
    ]
    p = Patcher(table, version_getter=lambda: SUPPORTED_FAKE)
    reason = p.apply()["f"]
    assert "changed signature" in reason and "track_slots" in reason
    assert not is_ours(fake_module.commit)


def test_unimportable_module_skips_the_feature():
    table = [
        Patch(name="x", feature="f", module="smd_no_such_module", attr="f", releases=">=0.5.12", wrapper=_tag("x"))
    ]
    p = Patcher(table, version_getter=lambda: SUPPORTED_FAKE)
    assert "cannot import smd_no_such_module" in p.apply()["f"]


@pytest.mark.parametrize("version", ["0.5.11", "0.5.24", "0.6.0", None, "not-a-version"])
def test_release_outside_range_wraps_nothing(fake_module, version):
    before = _raw(fake_module)
    p = Patcher(_table(), version_getter=lambda: version)
    reason = p.apply()["f"]
    assert reason is not None
    assert all(_raw(fake_module)[k] is before[k] for k in before)
    assert all(s["state"] == "skipped" for s in p.status().values())


def test_failure_while_installing_rolls_back(fake_module, monkeypatch):
    p = Patcher(_table(), version_getter=lambda: SUPPORTED_FAKE)
    before = _raw(fake_module)
    real_install = p._install
    seen = []

    def flaky(patch):
        if len(seen) == 2:
            raise RuntimeError("boom")
        seen.append(patch.name)
        real_install(patch)

    monkeypatch.setattr(p, "_install", flaky)
    reason = p.apply()["f"]
    assert "boom" in reason
    assert all(_raw(fake_module)[k] is before[k] for k in before)


def test_revert_leaves_someone_elses_wrapper_alone(fake_module):
    p = Patcher(_table(), version_getter=lambda: SUPPORTED_FAKE)
    p.apply()
    theirs = wrapt.FunctionWrapper(fake_module.commit, _tag("theirs"))
    fake_module.commit = theirs
    result = p.revert()
    assert "re-wrapped by someone else" in result["fn"]
    assert fake_module.commit is theirs
    assert not is_ours(theirs)


def test_duplicate_names_are_rejected():
    t = _table()
    with pytest.raises(ValueError, match="duplicate"):
        Patcher(t + t[:1])


def test_real_sglang_targets_apply_and_revert_exactly():
    """The production table on the installed SGLang: every feature applies, revert restores the originals."""
    import torch

    # the Mamba2 mixer binds its Triton conv only on CUDA: off a GPU that feature must be skipped, whole
    cuda_only = set() if torch.cuda.is_available() else {"zero_copy_mamba2"}
    originals = {}
    for p in PATCHES:
        if p.applies_to(installed.PATCHER._version_getter()) and p.feature not in cuda_only:
            parent, attr, raw = patcher.resolve(p.module, p.attr)
            originals[p.name] = (parent, attr, raw)
    result = installed.apply()
    version = installed.PATCHER._version_getter()
    for feature in cuda_only & set(result):
        reason = result.pop(feature)
        if any(p.feature == feature and p.applies_to(version) for p in PATCHES):  # else: not this release's
            assert reason is not None and "no attribute causal_conv1d_update_triton" in reason
        assert not installed.PATCHER.applied(feature)
    assert all(r is None for r in result.values()), result
    for name, (parent, attr, _raw) in originals.items():
        assert is_ours(vars(parent)[attr], name), name
    installed.revert()
    for name, (parent, attr, raw) in originals.items():
        assert vars(parent)[attr] is raw, name


def test_real_target_with_changed_signature_is_skipped(monkeypatch):
    """A release whose commit method lost a parameter: the feature is skipped, nothing of it wrapped."""
    import dataclasses

    import sglang_mamba_dedup.installed as sp

    bad = [
        dataclasses.replace(p, params=p.params + ("no_such_param",)) if p.feature == "commit" else p for p in PATCHES
    ]
    bad_patcher = Patcher(bad)
    monkeypatch.setattr(sp, "PATCHER", bad_patcher)
    result = bad_patcher.apply(SWITCHED_FEATURES)
    assert "no_such_param" in result["commit"]
    assert result["dedup_layout"] is None
    commit = next(p for p in bad if p.feature == "commit")
    parent, attr, raw = patcher.resolve(commit.module, commit.attr)
    assert not is_ours(raw)
    bad_patcher.revert()


# ------------------------------------------------------------------ calls our wrappers make into SGLang
@pytest.mark.parametrize(
    "ple_params,ok",
    [
        (("self", "a", "b", "c", "d"), True),  # 0.5.20 / 0.5.21
        (("self", "a", "b", "c", "d", "e=None"), True),  # 0.5.22 / 0.5.23
        (("self", "a", "b", "c", "d", "e"), False),  # a release that makes the 5th argument required
        (("self", "a", "b", "c"), False),  # one that drops one
        (None, True),  # absent (0.5.12 ... 0.5.19): our call is skipped
    ],
)
def test_callee_signature_is_checked_before_wrapping(fake_module, ple_params, ok):
    if ple_params is not None:
        ns = {}
        exec(f"def ple({', '.join(ple_params)}): return 'stock-ple'", ns)
        fake_module.Pool.ple = ns["ple"]
    callee = patcher.Callee("smd_fake_target", "Pool.ple", args=4, optional=True)
    table = [
        Patch(
            name="fn",
            feature="f",
            module="smd_fake_target",
            attr="commit",
            releases=">=0.5.12,<0.5.24",
            wrapper=_tag("ours"),
            params=("steps", "slots"),
            calls=(callee,),
        )
    ]
    p = Patcher(table, version_getter=lambda: SUPPORTED_FAKE)
    reason = p.apply(["f"])["f"]
    if ok:
        assert reason is None and p.applied() == ["fn"]
    else:
        assert "does not accept the 4-argument call" in reason and p.applied() == []
        assert not is_ours(fake_module.commit)
    missing = patcher.Callee("smd_fake_target", "Pool.nope", args=1)
    assert "does not exist" in missing.problem()


def test_installed_release_accepts_every_call_the_commit_makes():
    """The PLE / translate calls of our commit path bind against the installed SGLang (fails on 0.5.20/0.5.21
    when the plugin passes 0.5.23's arity)."""
    from sglang_mamba_dedup.patches import commit as commit_patch

    assert commit_patch.CALLEES
    problems = {c.target: c.problem() for c in commit_patch.CALLEES}
    assert not any(problems.values()), problems


def test_apply_takes_a_feature_name_or_a_list():
    assert set(installed.apply("launch_flag")) == {"launch_flag"}
    with pytest.raises(KeyError, match="unknown feature"):
        installed.apply(["no_such_feature"])


def test_a_foreign_star_args_wrapper_is_named_not_blamed_on_sglang():
    """A plain ``(self, *a, **kw)`` wrapper hides SGLang's parameters: the reason says so, instead of
    'changed signature' (which would send the user to the wrong release notes)."""

    def foreign(self, *a, **kw):
        return None

    with pytest.raises(patcher.TargetError) as exc:
        patcher.check_params(foreign, ("size", "device"), "MambaPool.__init__")
    text = str(exc.value)
    assert "another plugin's wrapper" in text and "changed signature" not in text and "size, device" in text

    def changed(self, size):
        return None

    with pytest.raises(patcher.TargetError, match="changed signature: no parameter"):
        patcher.check_params(changed, ("size", "device"), "MambaPool.__init__")


def test_self_first_is_one_answer_for_both_call_forms():
    """Issue 37: "called through the class attribute with self first" is answered in one place, the patcher's
    ``self_first``: the wrapper sees the same instance and arguments either way, and the call runs on it."""
    import wrapt

    from sglang_mamba_dedup.patcher import self_first

    seen = []

    class Owner:
        def method(self, a, b=0):
            return (self, a, b)

    def wrapper(wrapped, instance, args, kwargs):
        call, inst, rest, unbound = self_first(wrapped, instance, args, lambda o: isinstance(o, Owner))
        seen.append((inst, rest, unbound))
        return call(*rest, **kwargs)

    Owner.method = wrapt.FunctionWrapper(Owner.__dict__["method"], wrapper)
    o = Owner()
    assert o.method(1, b=2) == (o, 1, 2)
    assert Owner.method(o, 1, b=2) == (o, 1, 2)  # wrapt binds the instance itself here
    assert Owner.__dict__["method"](o, 1, b=2) == (o, 1, 2)  # the raw attribute: no instance, self first
    assert seen == [(o, (1,), False), (o, (1,), False), (o, (1,), True)]
    assert self_first(len, None, ("x",), lambda obj: isinstance(obj, Owner)) == (len, None, ("x",), False)
