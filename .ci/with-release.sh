#!/usr/bin/env bash
# Runs a command against one SGLang release, from the overlay .ci/setup-env.sh built for it:
#
#   bash .ci/with-release.sh 0.5.16 python -m pytest -m release tests
#
# The overlay goes first on PYTHONPATH, so the base venv's SGLang (0.5.23) and its newer transformers are
# shadowed by the release's own; `python` is the base venv's. The base release itself needs no overlay.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rel=${1:?usage: with-release.sh RELEASE COMMAND...}
shift
VENV=${VENV:-$root/.venv}
export PATH="$VENV/bin:$PATH"
if [ -d "$VENV/overlays/$rel" ]; then
  export PYTHONPATH="$VENV/overlays/$rel${PYTHONPATH:+:$PYTHONPATH}"
elif [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))')" != "$rel" ]; then
  echo "no overlay for SGLang $rel: run bash .ci/setup-env.sh $rel" >&2
  exit 2
fi
exec "$@"
