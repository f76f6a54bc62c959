#!/usr/bin/env bash
# Test environments with the real SGLang, installed the way ../shared/FACTS.md §5 describes for CPU machines.
#
#   bash .ci/setup-env.sh                 # the base venv .venv: CPU torch 2.13.0, triton, the pure-Python
#                                         # packages SGLang imports at module load, SGLang $BASE_RELEASE
#   bash .ci/setup-env.sh 0.5.16 0.5.21   # plus one overlay per release: .venv/overlays/<release>/ holds
#                                         # that release's sglang (--no-deps) and the transformers/tokenizers
#                                         # pins it needs; use it with .ci/with-release.sh <release> <cmd>
#   bash .ci/setup-env.sh all             # every release in sglang_mamba_dedup.versions.RELEASES
#   bash .ci/setup-env.sh --overlays 0.5.16 0.5.21   # the overlays only, beside a ready base venv (.ci/test.sh
#                                         # builds them while the first test jobs run: nothing in the base venv,
#                                         # the editable install included, is touched)
#
# An overlay is put in front of the base venv's site-packages through PYTHONPATH, so `import sglang` and
# importlib.metadata both see the overlay's release. Idempotent: a venv or overlay whose stamp matches is kept.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
VENV=${VENV:-.venv}
case $VENV in /*) ;; *) VENV=$root/$VENV ;; esac  # absolute: an overlay's import check puts it on PYTHONPATH
BASE_RELEASE=0.5.23
PY=${PYTHON:-python3}
quiet() { grep -v -e '^WARNING: Location' -e "^WARNING: Running pip as the 'root'" -e '^WARNING: Target directory' || true; }

stamp="$VENV/.stamp-base-$BASE_RELEASE-v2"
overlays_only=0
if [ "${1:-}" = --overlays ]; then
  overlays_only=1
  shift
  [ -f "$stamp" ] || { echo "--overlays: no base venv in $VENV (run bash .ci/setup-env.sh first)" >&2; exit 1; }
fi
if [ "$overlays_only" = 0 ] && [ ! -f "$stamp" ]; then
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  pip="$VENV/bin/python -m pip"
  $pip install -q --upgrade pip 2>&1 | quiet
  # huggingface-hub 1.x: the transformers of 0.5.12 ... 0.5.19 need <2 (transformers 5.19 takes >=1.31).
  # xgrammar: 0.5.14 ... 0.5.20 import it at module load (0.5.20 through function_call/inkling_detector.py).
  $pip install -q torch==2.13.0 triton==3.7.1 numpy wrapt packaging pytest safetensors setuptools wheel \
    orjson psutil pybase64 requests pillow starlette msgspec pydantic pyzmq tqdm ipython aiohttp dill \
    transformers==5.19.0 apache-tvm-ffi==0.1.11 sentencepiece==0.2.1 compressed-tensors==0.18.0 gguf einops \
    openai==2.8.0 partial-json-parser uvicorn fastapi setproctitle xgrammar==0.2.1 huggingface-hub==1.33.0 \
    ruff==0.17.6 mypy==2.4.1 2>&1 | quiet
  $pip install -q --no-deps "sglang==$BASE_RELEASE" torchvision==0.28.0 2>&1 | quiet
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cp .ci/torchvision_cpu_fix.py "$site/_smd_torchvision_cpu_fix.py"
  echo "import _smd_torchvision_cpu_fix" > "$site/_smd_torchvision_cpu_fix.pth"
  "$VENV/bin/python" -c "import sglang.srt.mem_cache.memory_pool" >/dev/null \
    || { echo "sglang $BASE_RELEASE does not import in $VENV" >&2; exit 1; }
  touch "$stamp"
  echo "ready: $VENV with sglang $BASE_RELEASE after $SECONDS s"
fi
if [ "$overlays_only" = 0 ]; then
  "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | quiet
  # lint tools (also for a base venv built before they were part of it)
  [ -x "$VENV/bin/ruff" ] && [ -x "$VENV/bin/mypy" ] || "$VENV/bin/python" -m pip install -q ruff==0.17.6 mypy==2.4.1 2>&1 | quiet
fi

releases=("$@")
if [ "${1:-}" = all ]; then
  mapfile -t releases < <("$VENV/bin/python" -c 'from sglang_mamba_dedup import versions; print("\n".join(versions.RELEASES))')
fi
for rel in "${releases[@]}"; do
  [ "$rel" = "$BASE_RELEASE" ] && continue
  dir="$VENV/overlays/$rel"
  [ -f "$dir/.stamp-v2" ] && continue
  # The pins each release's SGLang imports with on the CPU (FACTS §5); the rest comes from the base venv.
  t_overlay=$SECONDS
  pins=$("$VENV/bin/python" .ci/release_pins.py "$rel")
  rm -rf "$dir"
  "$VENV/bin/python" -m pip install -q --no-deps --target "$dir" "sglang==$rel" $pins 2>&1 | quiet
  PYTHONPATH="$dir" "$VENV/bin/python" -c "
import importlib.metadata as md, sys
import sglang.srt.mem_cache.memory_pool, sglang.srt.layers.attention.hybrid_linear_attn_backend
assert md.version('sglang') == sys.argv[1], md.version('sglang')" "$rel" \
    || { echo "sglang $rel does not import from $dir" >&2; exit 1; }
  touch "$dir/.stamp-v2"
  echo "ready: overlay $dir (sglang $rel${pins:+ + $pins}) after $((SECONDS - t_overlay)) s"
done
