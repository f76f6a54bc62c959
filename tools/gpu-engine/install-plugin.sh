#!/usr/bin/env bash
# Installs this checkout's plugin on the lent GPU machine the way its wheel lays it out (test infrastructure):
# the packages pyproject.toml lists ([tool.setuptools] packages, package-dir, package-data: patches/ becomes
# sglang_mamba_dedup/patches/, the JSON data and py.typed come along, nothing else) under /tmp/smd-meta, and a
# dist-info carrying the entry points, so SGLang's own loader finds the `sglang.srt.plugins` one. No build
# backend is needed (the device has no setuptools). Put /tmp/smd-meta on PYTHONPATH and run Python with -P (or
# from another directory) so the checkout's own folder does not shadow it.
#
#   bash tools/gpu-engine/install-plugin.sh [SOURCE_ROOT [DEST]]   # defaults: this checkout, /tmp/smd-meta
#
# SOURCE_ROOT may be another build's tree (e.g. `git archive <commit> sglang_mamba_dedup patches pyproject.toml`
# unpacked into .old/) to compare builds side by side.
set -euo pipefail
root=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
dest=${2:-/tmp/smd-meta}
rm -rf "$dest" && mkdir -p "$dest"
python3 - "$root" "$dest" <<'PY'
import pathlib, shutil, sys, tomllib

root, dest = (pathlib.Path(a) for a in sys.argv[1:3])
pyproject = tomllib.loads((root / "pyproject.toml").read_text())
proj, st = pyproject["project"], pyproject.get("tool", {}).get("setuptools", {})
package_dir, package_data = st.get("package-dir", {}), st.get("package-data", {})


def source(pkg):
    """The package's folder: package-dir maps it (or a parent package) elsewhere, else its dotted path."""
    parts = pkg.split(".")
    for i in range(len(parts), -1, -1):
        key = ".".join(parts[:i])
        if key in package_dir:
            return root / package_dir[key] / pathlib.Path(*parts[i:])
    return root / pathlib.Path(*parts)


n = 0
for pkg in st["packages"]:  # every build of ours lists its packages
    src, out = source(pkg), dest / pathlib.Path(*pkg.split("."))
    if not (src / "__init__.py").is_file():
        sys.exit(f"install-plugin: package {pkg}: no {src}/__init__.py")
    files = sorted(src.glob("*.py"))
    for pattern in package_data.get(pkg, []) + package_data.get("", []) + package_data.get("*", []):
        files += sorted(p for p in src.glob(pattern) if p.is_file())
    for f in files:
        target = out / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
        n += 1
d = dest / f"{proj['name'].replace('-', '_')}-{proj['version']}.dist-info"
d.mkdir(parents=True)
(d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {proj['name']}\nVersion: {proj['version']}\n")
groups = dict(proj.get("entry-points", {}))
if proj.get("scripts"):
    groups["console_scripts"] = proj["scripts"]
lines = []
for group, eps in groups.items():
    lines.append(f"[{group}]")
    lines += [f"{k} = {v}" for k, v in eps.items()]
(d / "entry_points.txt").write_text("\n".join(lines) + "\n")
(d / "top_level.txt").write_text("sglang_mamba_dedup\n")
print(f"install-plugin: {len(st['packages'])} packages, {n} files from {root} into {dest}")
PY
