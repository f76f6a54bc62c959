"""The patch table is complete and consistent (in the spirit of Liger's mapping test)."""

import importlib
import inspect
import pathlib
import pkgutil
import sys

import pytest

from sglang_mamba_dedup import env, versions
from sglang_mamba_dedup.cli import evidence
from sglang_mamba_dedup.patches import FEATURES, PATCHES

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_wrapper_in_the_patches_package_is_in_the_table():
    import sglang_mamba_dedup.patches as pkg

    in_table = {id(p.wrapper) for p in PATCHES}
    lazy = {getattr(p.wrapper, "_smd_lazy", None) for p in PATCHES} - {None}  # imported at their first call
    defined = []
    for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{pkg.__name__}."):  # zero_copy/ is a folder of modules
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if inspect.isfunction(obj) and obj.__module__ == mod.__name__ and not name.startswith("_"):
                params = list(inspect.signature(obj).parameters)
                if params == ["wrapped", "instance", "args", "kwargs"]:
                    defined.append((mod.__name__, name, obj))
    assert defined, "no wrappers found: the test would prove nothing"
    missing = [f"{m}.{n}" for m, n, o in defined if id(o) not in in_table and f"{m}.{n}" not in lazy]
    assert lazy <= {f"{m}.{n}" for m, n, _o in defined}, "a lazy wrapper names no function of the patches package"
    assert not missing, f"wrappers not in the patch table: {missing}"


def test_targets_are_unique_and_features_known():
    targets = [(p.target, p.releases) for p in PATCHES]
    assert len(targets) == len(set(targets))
    assert {p.feature for p in PATCHES} <= set(FEATURES)


def test_every_release_range_is_inside_the_supported_range():
    from packaging.specifiers import SpecifierSet

    probes = [f"0.5.{m}" for m in range(10, 26)] + ["0.5.13.post1", "0.5.15.post1", "0.5.23.post1"]
    for p in PATCHES:
        for v in probes:
            if v in SpecifierSet(p.releases):
                assert versions.in_range(v), (p.name, v)


def test_pyproject_extra_declares_the_same_range():
    import tomllib

    from packaging.requirements import Requirement

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["sglang"]
    (req,) = [Requirement(e) for e in extra]
    assert req.name == "sglang" and req.specifier == versions.SUPPORTED, extra


def test_patches_ship_inside_the_package(tmp_path):
    """Installed (editable here), ``sglang_mamba_dedup.patches`` is the top-level ``patches/`` folder and no
    top-level ``patches`` module leaks into the environment (checked in a fresh process, from an empty
    folder, so neither the checkout nor pytest's rootdir is on sys.path)."""
    import subprocess

    code = (
        "import importlib.util, json, sglang_mamba_dedup.patches as p; "
        "print(json.dumps([p.__file__, importlib.util.find_spec('patches') is not None]))"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    path, leaked = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert pathlib.Path(path).resolve() == (ROOT / "patches" / "__init__.py").resolve(), path
    assert not leaked, "a top-level 'patches' module is importable: the package-dir mapping is wrong"


def test_wheel_contents(tmp_path):
    """The wheel ships the patches inside our package, never as a top-level ``patches`` module."""
    import subprocess
    import zipfile

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("sglang_mamba_dedup-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "sglang_mamba_dedup/patches/__init__.py" in names
    assert "sglang_mamba_dedup/patches/dedup_layout.py" in names
    assert "sglang_mamba_dedup/kernels/__init__.py" in names and "sglang_mamba_dedup/kernels/state_commit.py" in names
    assert "sglang_mamba_dedup/py.typed" in names and "sglang_mamba_dedup/cli/doctor.py" in names
    assert not any(n.startswith("patches/") for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[sglang.srt.plugins]" in text and "mamba_dedup = sglang_mamba_dedup.activation:register" in text


# -------------------------------------------------------------------------------- every release we claim
#: What each feature must select on each release, written out by hand from the installed wheels (FACTS §1,
#: corrected: the pool builder moved to kv_cache_configurator in 0.5.16). A change of a boundary in
#: ``versions.py`` that does not match SGLang's history fails here.
_OLD = ("0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1")
_BACKPORT = ("0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1")
_NO_UNIFIED_POOL = (*_BACKPORT, "0.5.14")  # UnifiedMambaPool appears in 0.5.15


def _expected(release):
    return {
        "launch_flag": {"server_args.add_cli_args", "server_args.from_cli_args"},
        "dedup_layout": {"mamba_pool.init"}
        if release in _NO_UNIFIED_POOL
        else {"mamba_pool.init", "unified_mamba_pool.init"},
        "commit": {"hybrid_linear_attn.update_mamba_state_after_mtp_verify"},
        "topk_plumbing": {"kv_cache_mixin.init_pools"} if release in _BACKPORT else set(),
        "estimator": {"kv_cache_mixin.handle_max_mamba_cache"}
        if release in _OLD
        else {"kv_cache_configurator.handle_max_mamba_cache"},
        # Scheduler.get_internal_state in every release; 0.5.12 ... 0.5.12.post1 import sgl_kernel with it (no CPU test)
        "server_state": set() if release in ("0.5.12", "0.5.12.post1") else {"scheduler.get_internal_state"},
        "zero_copy": {
            "gdn_backend.forward_extend",
            "gdn_backend.select_verify_intermediate_state_indices",
            "gdn_triton.target_verify",
            "streaming_session.try_cache_finished_req",
            "model_runner.deferred_mamba_cow_and_clear",
            "mamba_component.prepare_for_caching_req",
            "unified_radix_cache.evict",
            "batch_result_processor.mamba_check_track_boundary",
        }
        if release == versions.ZERO_COPY_RELEASE
        else set(),
        "zero_copy_mamba2": {
            "mamba2_backend.forward",
            "mamba2_mixer.causal_conv1d_update_triton",
            "mamba2_mixer.selective_state_update",
        }
        if release == versions.ZERO_COPY_RELEASE
        else set(),
    }


@pytest.mark.parametrize("release", versions.RELEASES)
def test_each_release_selects_the_patches_it_needs(release):
    from sglang_mamba_dedup import installed

    for feature, names in _expected(release).items():
        got = {p.name for p in installed.PATCHER.patches_for(feature, release)}
        assert got == names, (release, feature, got)
    assert versions.mode_for(release) == ("backport" if release in _BACKPORT else "takeover")


@pytest.mark.parametrize("release", versions.RELEASES)
def test_doctor_release_lists_the_same_targets(release, capsys):
    from sglang_mamba_dedup.cli import doctor

    assert doctor.main(["--release", release]) == 0
    out = capsys.readouterr().out
    names = set().union(*_expected(release).values())
    for p in PATCHES:
        if p.feature != "launch_flag":
            assert (p.target in out) == (p.name in names), (release, p.name)


def test_ranges_come_from_the_named_boundaries():
    """Widening versions.SUPPORTED alone must move every range (no literal ranges in the table)."""
    text = (ROOT / "patches" / "__init__.py").read_text()
    assert "0.5." not in text, "release literals in the patch table: derive them from versions.py"
    assert versions.RELEASES[0] == versions.FIRST
    assert all(versions.in_range(r) for r in versions.RELEASES)
    assert not versions.in_range(versions.UNTESTED_FROM)


@pytest.mark.parametrize(
    "version,allowed,problem,mode",
    [
        ("0.5.24", False, "newer than every release", "unsupported"),
        ("0.5.24rc1", False, "newer than every release", "unsupported"),
        ("0.5.23.post1", False, "newer than every release", "unsupported"),
        ("0.5.24.dev0", True, None, "takeover"),
        ("0.5.24", True, None, "takeover"),
        ("0.6.0", True, None, "takeover"),
        ("0.5.11", True, "older than 0.5.12", "unsupported"),
        ("nonsense", True, "unparsable", "unsupported"),
    ],
)
def test_untested_newer_release_only_with_the_opt_in(monkeypatch, version, allowed, problem, mode):
    if allowed:
        monkeypatch.setenv(env.ALLOW_UNTESTED, "1")
    else:
        monkeypatch.delenv(env.ALLOW_UNTESTED, raising=False)
    got = versions.support_problem(version)
    assert (got is None) if problem is None else (problem in got), got
    assert versions.mode_for(version) == mode
    if allowed and problem is None:
        from sglang_mamba_dedup import installed

        assert {p.name for p in installed.PATCHER.patches_for("commit", version)} == _expected("0.5.23")["commit"]
        assert "UNTESTED" in versions.untested_note(version)


def _block(text: str, name: str) -> str:
    start, end = f"<!-- {name}:start -->\n", f"\n<!-- {name}:end -->"
    return text[text.index(start) + len(start) : text.index(end)]


def test_readme_patch_table_is_generated_from_the_patch_table():
    """README's "What it patches" is ``sglang-mamba-dedup doctor --patch-table``: one row per patch, and one per
    asked-for feature (zero-copy) naming each of its targets."""
    from sglang_mamba_dedup.cli import doctor
    from sglang_mamba_dedup.patches import ASKED_FOR

    block = _block((ROOT / "README.md").read_text(), "patch-table")
    assert block == doctor.patch_table_markdown()
    assert block.count("\n| `") == len([p for p in PATCHES if p.feature not in ASKED_FOR]) + len(ASKED_FOR)
    for p in PATCHES:
        if p.feature in ASKED_FOR:
            assert ".".join(p.target.split(".")[-2:]) in block, p.name


def test_readme_stays_short():
    assert len((ROOT / "README.md").read_bytes()) <= 12 * 1024


def test_release_matrix_in_docs_is_the_one_in_versions():
    text = (ROOT / "docs" / "releases.md").read_text()
    start, end = "<!-- release-matrix:start -->\n", "\n<!-- release-matrix:end -->"
    block = text[text.index(start) + len(start) : text.index(end)]
    assert block == evidence.matrix()
    assert set(evidence.EVIDENCE) == set(versions.RELEASES)


@pytest.mark.parametrize("release", versions.RELEASES)
def test_the_release_facts_are_decided_in_one_place(release):
    """``versions.release()`` answers every per-release question the serving code and the planner ask."""
    r = versions.release(release)
    assert r.mode == versions.mode_for(release) and r.backport == (r.mode == "backport")
    assert r.new_layout == versions.in_range(release, versions.NEW_LAYOUT)
    assert r.zero_copy == (release == versions.ZERO_COPY_RELEASE)


def test_an_untested_release_is_patched_as_the_newest_only_when_allowed(monkeypatch):
    monkeypatch.delenv(env.ALLOW_UNTESTED, raising=False)
    assert versions.release("0.5.24").mode == "unsupported"
    monkeypatch.setenv(env.ALLOW_UNTESTED, "1")
    r = versions.release("0.5.24")
    assert r.mode == "takeover" and r.patched_as == versions.RELEASES[-1] and r.new_layout and not r.zero_copy
