#!/usr/bin/env bash
# Installs this checkout's plugin on the lent GPU machine the way its wheel lays it out (test infrastructure):
# /tmp/smd-meta/sglang_mamba_dedup/ with patches/ as sglang_mamba_dedup/patches/, and a dist-info carrying the
# `sglang.srt.plugins` entry point, so SGLang's own loader finds it. Put /tmp/smd-meta on PYTHONPATH and run
# Python with -P (or from another directory) so the checkout's own folder does not shadow it.
#
#   bash tools/gpu-engine/install-plugin.sh [SOURCE_ROOT [DEST]]   # defaults: this checkout, /tmp/smd-meta
#
# SOURCE_ROOT may be another build's tree (e.g. `git archive <commit> sglang_mamba_dedup patches pyproject.toml`
# unpacked into .old/) to compare builds side by side.
set -euo pipefail
root=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
dest=${2:-/tmp/smd-meta}
rm -rf "$dest" && mkdir -p "$dest"
cp -r "$root/sglang_mamba_dedup" "$dest/"
rm -rf "$dest/sglang_mamba_dedup/patches" && cp -r "$root/patches" "$dest/sglang_mamba_dedup/patches"
python3 - "$root" "$dest" <<'PY'
import pathlib, sys, tomllib
root = pathlib.Path(sys.argv[1])
proj = tomllib.loads((root / "pyproject.toml").read_text())["project"]
d = pathlib.Path(sys.argv[2]) / f"{proj['name'].replace('-', '_')}-{proj['version']}.dist-info"
d.mkdir(parents=True)
(d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {proj['name']}\nVersion: {proj['version']}\n")
lines = []
for group, eps in proj.get("entry-points", {}).items():
    lines.append(f"[{group}]")
    lines += [f"{k} = {v}" for k, v in eps.items()]
(d / "entry_points.txt").write_text("\n".join(lines) + "\n")
(d / "top_level.txt").write_text("sglang_mamba_dedup\n")
PY
