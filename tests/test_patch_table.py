"""The patch table is complete and consistent (in the spirit of Liger's mapping test)."""
import importlib
import inspect
import pathlib
import pkgutil
import sys

import pytest

from sglang_mamba_dedup import versions
from sglang_mamba_dedup.patches import FEATURES, PATCHES

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_wrapper_in_the_patches_package_is_in_the_table():
    import sglang_mamba_dedup.patches as pkg

    in_table = {id(p.wrapper) for p in PATCHES}
    defined = []
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        for name, obj in vars(mod).items():
            if inspect.isfunction(obj) and obj.__module__ == mod.__name__ and not name.startswith("_"):
                params = list(inspect.signature(obj).parameters)
                if params == ["wrapped", "instance", "args", "kwargs"]:
                    defined.append((mod.__name__, name, obj))
    assert defined, "no wrappers found: the test would prove nothing"
    missing = [f"{m}.{n}" for m, n, o in defined if id(o) not in in_table]
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
    text = (ROOT / "pyproject.toml").read_text()
    if sys.version_info >= (3, 11):
        import tomllib

        extra = tomllib.loads(text)["project"]["optional-dependencies"]["sglang"]
        from packaging.requirements import Requirement

        (req,) = [Requirement(e) for e in extra]
        assert req.name == "sglang" and req.specifier == versions.SUPPORTED, extra
    else:
        pytest.skip("tomllib needs Python 3.11")


def test_patches_ship_inside_the_package():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"sglang_mamba_dedup.patches" = "patches"' in text
    import sglang_mamba_dedup.patches as pkg

    assert pkg.__name__ == "sglang_mamba_dedup.patches"


def test_wheel_contents(tmp_path):
    """The wheel ships the patches inside our package, never as a top-level ``patches`` module."""
    import subprocess
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("sglang_mamba_dedup-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "sglang_mamba_dedup/patches/__init__.py" in names
    assert "sglang_mamba_dedup/patches/mamba_pool.py" in names
    assert "sglang_mamba_dedup/kernels/__init__.py" in names
    assert not any(n.startswith("patches/") for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[sglang.srt.plugins]" in text and "mamba_dedup = sglang_mamba_dedup.activation:register" in text
