#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment with the real SGLang installed the way
# ../shared/FACTS.md §5 describes for CPU machines: CPU torch 2.13.0, triton, the pure-Python packages
# SGLang imports at module load, then SGLang itself without its dependency tree.
#
#   VENV=.venv SGLANG_VERSION=0.5.23 bash .ci/setup-env.sh
#
# SGLANG_VERSION=0.5.13.post1 pins the transformers/tokenizers that release needs (FACTS §5).
# Idempotent: a venv whose stamp matches is left alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
VENV=${VENV:-.venv}
SGLANG_VERSION=${SGLANG_VERSION:-0.5.23}
PY=${PYTHON:-python3}
stamp="$VENV/.stamp-sglang-$SGLANG_VERSION-v1"
if [ -f "$stamp" ]; then
  "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e . >/dev/null
  exit 0
fi
"$PY" -m venv "$VENV"
pip="$VENV/bin/python -m pip"
$pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
case "$SGLANG_VERSION" in
  0.5.1[0-3]*) tf="transformers==5.8.1 tokenizers==0.22.2"; extra="" ;;
  0.5.1[4-7]*) tf="transformers==5.12.1 tokenizers==0.22.2"; extra="xgrammar==0.2.1" ;;
  *)           tf="transformers==5.19.0"; extra="" ;;
esac
$pip install -q torch==2.13.0 triton==3.7.1 numpy wrapt packaging pytest safetensors setuptools wheel \
  orjson psutil pybase64 requests pillow starlette msgspec pydantic pyzmq tqdm ipython aiohttp dill \
  $tf apache-tvm-ffi==0.1.11 sentencepiece==0.2.1 compressed-tensors==0.18.0 gguf einops openai==2.8.0 \
  partial-json-parser uvicorn fastapi setproctitle $extra
$pip install -q --no-deps "sglang==$SGLANG_VERSION" torchvision==0.28.0
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp .ci/torchvision_cpu_fix.py "$site/_smd_torchvision_cpu_fix.py"
echo "import _smd_torchvision_cpu_fix" > "$site/_smd_torchvision_cpu_fix.pth"
$pip install -q --no-deps --no-build-isolation -e .
"$VENV/bin/python" -c "import sglang.srt.mem_cache.memory_pool" >/dev/null 2>&1 || { echo "sglang $SGLANG_VERSION does not import in $VENV" >&2; exit 1; }
touch "$stamp"
echo "ready: $VENV with sglang $SGLANG_VERSION"
