#!/usr/bin/env bash
# Device runner of the per-release GPU proof (README matrix, GPU column). Test infrastructure, not shipped.
#
#   bash tools/gpu-engine/run_release_sims.sh            # every sglang-*.whl carried in .whl/
#
# Carry [".whl", ".stub"]: .whl/ holds SGLang's import-time dependencies (../shared/gpu/prepare-carry.sh,
# without its sglang wheel), one or more `sglang-<release>` wheels, and for releases before 0.5.20 the
# transformers 5.12.1 / tokenizers 0.22.2 / huggingface-hub 1.33.0 wheels they import with (the device's own
# transformers 5.17 clashes with their `qwen3_asr` config). Each release is installed into its own folder
# /tmp/rel/<release>; tools/gpu-engine/proofs/release_sim_gpu.py then runs once per release, in its own process, with that
# folder first on PYTHONPATH. Installed folders stay on a warm machine for the next call.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/release-out}
mkdir -p "$OUT" /tmp/rel /tmp/pins
pipi() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$@" >>/tmp/smd-pip.log 2>&1; }
deps=$(ls .whl/*.whl | grep -v -E '/(sglang|transformers|tokenizers|huggingface_hub)-')
[ -f /tmp/site/.smd-ok ] || { pipi --target /tmp/site $deps && touch /tmp/site/.smd-ok; } || { tail -20 /tmp/smd-pip.log; exit 90; }
pins=$(ls .whl/*.whl | grep -E '/(transformers|tokenizers|huggingface_hub)-' || true)
[ -n "$pins" ] && [ ! -f /tmp/pins/.smd-ok ] && { pipi --target /tmp/pins $pins && touch /tmp/pins/.smd-ok || exit 91; }
bash tools/gpu-engine/install-plugin.sh || exit 92
status=0
for whl in .whl/sglang-*.whl; do
  rel=$(basename "$whl" | cut -d- -f2)
  [ -f "/tmp/rel/$rel/.smd-ok" ] || { pipi --target "/tmp/rel/$rel" "$whl" && touch "/tmp/rel/$rel/.smd-ok"; } || { echo "install of $rel failed"; status=1; continue; }
  extra=""
  python3 -c "import sys; from packaging.version import Version as V; sys.exit(0 if V(sys.argv[1]) < V('0.5.20') else 1)" "$rel" && extra=/tmp/pins:
  echo "===== SGLang $rel"
  PYTHONPATH="/tmp/smd-meta:/tmp/rel/$rel:$extra/tmp/site:$root/.stub" timeout 420 python3 -P tools/gpu-engine/proofs/release_sim_gpu.py --out "$OUT" \
    2>&1 | grep -v -E 'Warning|warnings.warn' | tee "$OUT/release-sim-$rel.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
exit $status
