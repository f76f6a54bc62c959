"""``pip install .`` leaves the checkout as it was (N2 of the 2026-12-04 newcomer audit): the project's build backend
(``tools/build_backend/smd_build.py``, setuptools' own hooks) removes the ``build/`` and ``*.egg-info`` folders a build
writes into the source folder, and keeps any that were there before. Run on a copy of the sources, with the
installed setuptools (what ``--no-build-isolation`` uses)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BUILD = """
import sys
sys.path.insert(0, "tools/build_backend")
import smd_build
print(smd_build.build_wheel(sys.argv[1]))
"""


def _copy_sources(dest: Path) -> None:
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(ROOT / name, dest / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "tools/build_backend", dest / "tools/build_backend", ignore=skip)
    shutil.copytree(ROOT / "patches", dest / "patches", ignore=skip)
    # a checkout's sglang_mamba_dedup/patches may be a link to ../patches (a worktree): the package without it
    shutil.copytree(ROOT / "sglang_mamba_dedup", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "patches"))
    (dest / "src").rename(dest / "sglang_mamba_dedup")


def test_the_pyproject_names_the_tidy_backend():
    system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    assert system["build-backend"] == "smd_build" and system["backend-path"] == ["tools/build_backend"]


def test_a_wheel_build_leaves_no_build_folder_or_egg_info(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    _copy_sources(src)
    kept = src / "build" / "mine.txt"  # a build/ of the user's own stays as it was
    kept.parent.mkdir()
    kept.write_text("not the build's")
    done = subprocess.run([sys.executable, "-c", BUILD, str(out)], cwd=src, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    wheel = out / done.stdout.strip().splitlines()[-1]
    names = zipfile.ZipFile(wheel).namelist()
    assert "sglang_mamba_dedup/e2e/watchdog.py" in names and "sglang_mamba_dedup/patches/__init__.py" in names
    assert not list(src.glob("*.egg-info")), sorted(p.name for p in src.iterdir())
    assert sorted(p.relative_to(src / "build").as_posix() for p in (src / "build").rglob("*")) == ["mine.txt"]
