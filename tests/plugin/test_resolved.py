"""The one reader of SGLang's resolved launch settings (:mod:`sglang_mamba_dedup.resolved`, design review 2026-12-04
D10): on a real ``ServerArgs`` of the installed release, resolved by SGLang's own parser and resolution, it reads the
decision (0.5.23's ``auto`` strategy as ``extra_buffer``, an older release's ``enable_mamba_extra_buffer()`` answer,
never the method itself); a setting the release does not have reads as ABSENT, and ``doctor``'s :func:`where` lists
the same ones; its table agrees with SGLang's own namespace declarations; the zero-copy gate and the planner read the
same values through it."""

from __future__ import annotations

import json
import types

import pytest

from sglang_mamba_dedup import resolved
from sglang_mamba_dedup.e2e import random_model
from sglang_mamba_dedup.planner import launch_config
from sglang_mamba_dedup.resolved import ABSENT

EXTRA_BUFFER = ("extra_buffer", "extra_buffer_lazy")


@pytest.fixture(scope="module", autouse=True)
def _republish_after():
    """These tests publish their launches to SGLang's runtime context: the simulations' own is published again."""
    yield
    from tests.support import integration as iu

    iu._published.clear()


@pytest.fixture(scope="module")
def qwen35_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3.5-0.8b")
    (path / "config.json").write_text(json.dumps(random_model.build_config(random_model.PRESETS["qwen3.5-0.8b"])))
    return path


def _launch(model, *extra: str):
    """A Qwen3.5 + MTP launch resolved as ``launch_server`` would on a CUDA GPU (and published), or None where this
    release refuses it (0.5.12 ... 0.5.13.post1 refuse the radix cache with speculative decoding: no_buffer)."""
    argv = [
        "--model-path", str(model), "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--speculative-draft-model-path", str(model), "--max-running-requests", "64", "--skip-tokenizer-init", *extra,
    ]  # fmt: skip
    try:
        return launch_config.resolve(argv, gpu_memory_gb=80)
    except launch_config.LaunchError:
        return None


@pytest.mark.release
@pytest.mark.parametrize(
    "extra",
    [(), ("--disable-overlap-schedule",), ("--disable-radix-cache",)],
    ids=["default", "no-overlap", "no-radix"],
)
def test_the_reader_reads_what_resolution_decided(extra, qwen35_dir):
    launch = _launch(qwen35_dir, *extra)
    if launch is None:
        assert extra != ("--disable-radix-cache",), "every release takes speculative decoding without the radix cache"
        pytest.skip("this release refuses speculative decoding with the radix cache here (no_buffer)")
    got = resolved.read(launch.server_args)
    assert set(got) == set(resolved.ROWS)
    assert not [k for k, v in got.items() if callable(v)], "a ServerArgs method read as a value"
    assert got["speculative_algorithm"] in ("EAGLE", "NEXTN") or getattr(got["speculative_algorithm"], "name", None)
    assert got["speculative_eagle_topk"] == 1 and got["speculative_num_draft_tokens"] == 4
    assert got["device"] == "cuda" and got["pp_size"] == 1 and got["tp_size"] == 1
    assert got["disable_radix_cache"] is ("--disable-radix-cache" in extra)
    assert got["disable_overlap_schedule"] is ("--disable-overlap-schedule" in extra)
    strategy = got["mamba_radix_cache_strategy"]
    radix = not got["disable_radix_cache"]
    assert strategy != "auto" or not radix, "the operator's value, not the decision (auto stays auto without radix)"
    # the extra buffer as SGLang itself answers it (a bag's leaf, or the release's own method), matching the strategy
    assert got["enable_mamba_extra_buffer"] is (radix and strategy in EXTRA_BUFFER)
    lazy = got["enable_mamba_extra_buffer_lazy"]
    assert lazy is ABSENT or lazy is (radix and strategy == "extra_buffer_lazy")
    # the planner's settings are these values, read by the same reader (the lazy flag was a bound method, so true,
    # on 0.5.13 ... 0.5.22 with the planner's own reader)
    st = launch.settings
    assert st["mamba_strategy"] == strategy and st["mamba_extra_buffer"] is got["enable_mamba_extra_buffer"]
    assert st["mamba_extra_buffer_lazy"] is (lazy is not ABSENT and lazy)
    assert st["radix_cache"] is radix and st["overlap_schedule"] is not got["disable_overlap_schedule"]


@pytest.mark.release
def test_the_radix_gates_other_backends_read_as_launched(qwen35_dir, monkeypatch):
    """A real launch with another radix cache backend: the reader gives the name as launched (None without it), the
    storage backend unset and no DCP; the zero-copy gate (radix opted in) refuses it with its one line."""
    from sglang_mamba_dedup import env
    from sglang_mamba_dedup.patches.zero_copy import eligibility

    plain = _launch(qwen35_dir)
    if plain is None:
        pytest.skip("this release refuses speculative decoding with the radix cache here (no_buffer)")
    got = resolved.read(plain.server_args)  # before the next launch publishes its own settings
    other = _launch(qwen35_dir, "--radix-cache-backend", "my_tree")
    assert other is not None, "SGLang refused a backend name at resolve"
    mine = resolved.read(other.server_args)
    for name, unset in (("radix_cache_backend", None), ("hicache_storage_backend", None), ("dcp_size", 1)):
        assert got[name] is ABSENT or got[name] == unset, (name, got[name])
    if mine["radix_cache_backend"] is ABSENT:
        pytest.skip("no --radix-cache-backend on this release")
    assert mine["radix_cache_backend"] == "my_tree"
    monkeypatch.delenv(env.ZERO_COPY_RADIX, raising=False)
    assert "another radix cache backend" in (eligibility.settings_problem(mine) or ""), mine
    assert "another radix cache backend" not in (eligibility.settings_problem(got) or "")


@pytest.mark.release
def test_a_setting_the_release_lacks_reads_as_absent_and_doctor_names_it(qwen35_dir):
    """What :func:`where` (``doctor``) says is absent on this release is exactly what reads as ABSENT on a real
    launch, and everything it says is present reads as a value."""
    launch = _launch(qwen35_dir, "--disable-radix-cache")
    got = resolved.read(launch.server_args)
    where = resolved.where()
    assert {k for k, v in got.items() if v is ABSENT} == {k for k, at in where.items() if at is None}
    if resolved._has_bags(resolved._runtime_context()):  # 0.5.17+: the bags answer, methods only for the buffer
        assert all(at is None or at.endswith(" bag") or at.endswith("()") for at in where.values()), where


@pytest.mark.release
def test_each_rows_bag_is_the_namespace_sglang_declares():
    """Where the release declares its runtime-context namespaces (0.5.17+), each row's bag is SGLang's own, so the
    reader looks where the release publishes the decision; no row names a bag SGLang does not have."""
    from sglang.srt.server_args import ServerArgs

    declared = resolved.declared_namespaces(ServerArgs)
    if not declared:
        pytest.skip("this release declares no runtime-context namespaces (before 0.5.17)")
    wrong = {r.name: (r.bag, declared[r.name]) for r in resolved.SETTINGS if declared.get(r.name, r.bag) != r.bag}
    assert not wrong, wrong
    assert {r.bag for r in resolved.SETTINGS} <= set(declared.values())


@pytest.mark.release
def test_the_gate_and_the_planner_read_the_same_settings(qwen35_dir):
    """The zero-copy gate reads the published launch (a server's runtime context), the planner its ``ServerArgs``:
    one reader, the same values."""
    from sglang_mamba_dedup.patches.zero_copy import eligibility

    rc = resolved._runtime_context()
    if rc is None or getattr(rc.get_context(), "set_server_args", None) is None:
        pytest.skip("this release publishes no launch to its runtime context (before 0.5.16)")
    launch = _launch(qwen35_dir, "--disable-radix-cache")
    gate = eligibility.read_settings()
    planner = resolved.read(launch.server_args)
    assert gate == {name: planner[name] for name in gate} and "disable_radix_cache" in gate
    st = launch.settings
    assert gate["disable_radix_cache"] is True and st["radix_cache"] is False
    assert (gate["speculative_algorithm"], gate["speculative_eagle_topk"], gate["pp_size"]) == (
        st["speculative_algorithm"],
        st["speculative_eagle_topk"],
        st["pp_size"],
    )
    ssm = gate["enable_linear_replayssm_spec"]
    assert st["replayssm"] is (ssm is not ABSENT and bool(ssm))


def test_absent_is_never_a_guess(monkeypatch):
    """No runtime context (a release before 0.5.14): ServerArgs alone answers; a missing attribute is ABSENT, a method
    is SGLang's answer only where the row says so, and ABSENT has no truth value."""
    monkeypatch.setattr(resolved, "_runtime_context", lambda: None)
    sa = types.SimpleNamespace(
        mamba_scheduler_strategy="extra_buffer",  # an older release's spelling
        enable_mamba_extra_buffer=lambda: True,  # an older release's method
        disable_radix_cache=lambda: False,  # a method where a value is expected: never read as one
        pp_size=1,
    )
    got = resolved.read(sa)
    assert got["mamba_radix_cache_strategy"] == "extra_buffer" and got["enable_mamba_extra_buffer"] is True
    assert got["disable_radix_cache"] is ABSENT and got["enable_flexkv"] is ABSENT and got["pp_size"] == 1
    assert resolved.value_or(got, "enable_flexkv", False) is False and resolved.value_or(got, "pp_size", 2) == 1
    with pytest.raises(TypeError, match="no truth value"):
        bool(ABSENT)
    assert repr(ABSENT) == "ABSENT"
    with pytest.raises(ValueError, match="not a setting"):
        resolved.read(sa, ["no_such_setting"])


@pytest.mark.release
def test_bags_of_another_launch_are_not_read(qwen35_dir):
    """0.5.17+: the bags are the published launch's; reading them for another ``ServerArgs`` is a clear error."""
    if not resolved._has_bags(resolved._runtime_context()):
        pytest.skip("no runtime-context bags on this release")
    launch = _launch(qwen35_dir, "--disable-radix-cache")
    other = types.SimpleNamespace(disable_radix_cache=False)
    with pytest.raises(LookupError, match="another launch"):
        resolved.read(other)
    assert resolved.read(launch.server_args, ["disable_radix_cache"]) == {"disable_radix_cache": True}


def test_the_serving_core_reader_imports_no_planner_and_no_sglang_at_load():
    import ast
    import pathlib

    tree = ast.parse(pathlib.Path(resolved.__file__).read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = [a.name for n in top for a in n.names] + [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
    assert not [n for n in names if "sglang" in n or "planner" in n], names
