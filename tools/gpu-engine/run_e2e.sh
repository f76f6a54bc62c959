#!/usr/bin/env bash
# Device runner of the end-to-end md5 check on the lent H200. Test infrastructure, not part of the package.
#
#   bash tools/gpu-engine/run_e2e.sh [MODES] [extra `sglang-mamba-dedup e2e` options ...]
#
# MODES defaults to off,on,fault: every proof runs the negative control too (the plugin on with its commit
# deliberately broken, SGLANG_MAMBA_DEDUP_FAULT=commit_step0, sglang_mamba_dedup/faults.py). The exit status
# is the e2e's: 0 only when off == on, the plugin engaged and the fault run differs ("negative control
# caught"); 6 when the fault run gives the same md5.
#
# Run from the repository root through the device `run` tool with carry [".whl", ".stub"] (the 37 wheels
# of SGLang 0.5.23 and the sgl_kernel stand-in, ../shared/gpu/README.md). WHEEL_DIR (default .whl) names
# another carried wheel folder, e.g. for SGLang 0.5.13.post1 (carry [".whl513", ".stub"]):
#   WHEEL_DIR=.whl513 SGLANG_WHEEL=.whl513/sglang-0.5.13.post1-cp312-cp312-manylinux_2_34_x86_64.whl \
#     bash tools/gpu-engine/run_e2e.sh off,on
# It
#   1. installs the wheels into /tmp/site (skipped on a warm machine that has the same wheels there),
#   2. installs the plugin from this checkout in its wheel layout with its `sglang.srt.plugins` entry point
#      (tools/gpu-engine/install-plugin.sh, into /tmp/smd-meta), and checks that
#      SGLang's own entry-point lookup sees it,
#   3. puts tools/gpu-engine on PYTHONPATH: its sitecustomize.py installs the stand-ins of FACTS §8 (standins/)
#      in every SGLang process, the spawned scheduler included,
#   4. runs the e2e driver on a random-weight model (MTP included) with NEXTN, with the Triton/torch engine
#      options the stand-ins need; logs, results and reports go to $OUT. E2E_PRESET picks the random model's
#      preset (default qwen3.5-0.8b; nemotron-h-mini / nemotron-h-mini-bf16: Mamba2, Nemotron-H-8B's state),
#      built once per preset into /tmp/smd-model-<preset>. E2E_SERVER_TOO=1 runs the launch_server route
#      (off,on) after the offline runs, with the same options; the exit status is the first nonzero.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/e2e-out}
mkdir -p "$OUT"
MODES=${1:-off,on,fault}
shift || true
T0=$(date +%s)
stamp() { echo "[run_e2e +$(( $(date +%s) - T0 ))s] $*"; }

WHEEL_DIR=${WHEEL_DIR:-.whl}
deps=$(ls "$WHEEL_DIR"/*.whl | grep -v -E "/(${SGLANG_WHEEL:+sglang|}transformers|tokenizers|huggingface_hub)-")
if [ "$(cat /tmp/site/.smd-ok 2>/dev/null)" != "$(basename -a $deps)" ]; then  # another wheel set: reinstall
  rm -rf /tmp/site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $deps \
    >/tmp/smd-pip.log 2>&1 && basename -a $deps > /tmp/site/.smd-ok || { stamp "wheel install failed"; tail -20 /tmp/smd-pip.log; exit 90; }
  stamp "wheels installed"
fi

bash tools/gpu-engine/install-plugin.sh || exit 91
# SGLANG_WHEEL=.whl/sglang-<release>-....whl: run that release instead of the one in /tmp/site (installed
# into its own folder, first on PYTHONPATH), e.g. for the per-release e2e of the README matrix.
# Releases before 0.5.20 import with transformers 5.12.1 / tokenizers 0.22.2 / huggingface-hub 1.33.0 (the
# device's transformers 5.17 clashes with their `qwen3_asr` config): when WHEEL_DIR carries those wheels they
# go to /tmp/pins, on PYTHONPATH after the release and before /tmp/site.
overlay=""
rel=""
release_below() {  # true when SGLANG_WHEEL's release is older than $1 (outside our PYTHONPATH: no stand-ins)
  [ -n "$rel" ] && PYTHONPATH= python3 -c "import sys; from packaging.version import Version as V; sys.exit(0 if V(sys.argv[1]) < V(sys.argv[2]) else 1)" "$rel" "$1"
}
if [ -n "${SGLANG_WHEEL:-}" ]; then
  rel=$(basename "$SGLANG_WHEEL" | cut -d- -f2)
  overlay=/tmp/relfull/$rel
  [ -f "$overlay/.smd-ok" ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$overlay" "$SGLANG_WHEEL" >/tmp/smd-pip.log 2>&1 && touch "$overlay/.smd-ok"; } || { stamp "install of $SGLANG_WHEEL failed"; exit 90; }
  overlay="$overlay:"
  pins=$(ls "$WHEEL_DIR"/*.whl | grep -E '/(transformers|tokenizers|huggingface_hub)-' || true)
  if [ -n "$pins" ] && release_below 0.5.20; then
    [ -f /tmp/pins/.smd-ok ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/pins $pins >/tmp/smd-pip.log 2>&1 && touch /tmp/pins/.smd-ok; } || { stamp "install of the pins failed"; tail -20 /tmp/smd-pip.log; exit 90; }
    overlay="$overlay/tmp/pins:"
  fi
  # releases before 0.5.23 import flashinfer (absent here) at module load on CUDA: standins/imports.py
  release_below 0.5.23 && export SGLANG_STANDINS_FLASHINFER=${SGLANG_STANDINS_FLASHINFER:-1}
fi
export PYTHONPATH=/tmp/smd-meta:$overlay/tmp/site:$root/.stub:$root/tools/gpu-engine
export PYTHONUNBUFFERED=1 SGLANG_STANDINS_QUIET=${SGLANG_STANDINS_QUIET:-0}

python3 - <<'PY' 2>&1 | tee "$OUT/env.txt"
import importlib.metadata as md, sys
print("python", sys.version.split()[0])
for d in ("sglang", "torch", "triton", "transformers", "sglang-mamba-dedup", "wrapt", "safetensors"):
    try: print(d, md.version(d))
    except Exception as e: print(d, "MISSING", e)
print("entry points sglang.srt.plugins:", [f"{e.name}={e.value}" for e in md.entry_points(group="sglang.srt.plugins")])
import torch
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "cuda", torch.version.cuda)
PY
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tee -a "$OUT/env.txt"
stamp "environment ready; running e2e (modes $MODES)"

# Deployment settings (the e2e's defaults, issue 11): decode CUDA graphs on, prefill CUDA graphs off, radix
# cache on, overlap scheduling as SGLang decides. The e2e passes only what the release's ServerArgs knows
# (before 0.5.14: its own decode graphs, disable_piecewise_cuda_graph=true for prefill) and names the rest in
# its header; `--no-cuda-graph` / `--no-radix-cache` among the extra options give the old settings. The radix
# cache needs SGLang's Python tree core here (the Rust one is built against another torch and panics).
export SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=${SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND:-python}
# Before 0.5.18 SGLang ignores the checkpoint's `language_model_only` and would load a multimodal processor
# (the random model has none).
release_args=()
release_below 0.5.18 && release_args+=(--engine-arg enable_multimodal=false)

PRESET=${E2E_PRESET:-qwen3.5-0.8b}
e2e() {
python3 -P -m sglang_mamba_dedup.e2e \
  --random-weights --random-preset "$PRESET" --random-weights-dir "/tmp/smd-model-$PRESET" \
  --max-new-tokens "${E2E_MAX_NEW_TOKENS:-128}" \
  --mem-fraction-static 0.3 \
  --run-timeout "${E2E_RUN_TIMEOUT:-240}" \
  --workdir "$WD" \
  --engine-arg attention_backend=triton \
  --engine-arg sampling_backend=pytorch \
  --engine-arg grammar_backend=none \
  --engine-arg linear_attn_prefill_backend=triton \
  ${release_args[@]+"${release_args[@]}"} \
  --engine-arg tp_size=1 \
  "$@"
}
WD=$OUT/work e2e --modes "$MODES" --json-out "$OUT/summary.json" "$@" 2>&1 | tee "$OUT/e2e.txt"
rc=${PIPESTATUS[0]}
if [ "${E2E_SERVER_TOO:-0}" = 1 ]; then
  stamp "e2e exit code $rc; launch_server route (off,on)"
  WD=$OUT/work-server e2e --server --modes off,on --json-out "$OUT/summary-server.json" "$@" 2>&1 | tee "$OUT/e2e-server.txt"
  src=${PIPESTATUS[0]}
  [ "$rc" = 0 ] && rc=$src
fi
# keep what comes back small (at most 8 files): one log of all runs, one JSON of all status reports
for f in "$OUT"/work/run-*.log "$OUT"/work-server/run-*.log; do [ -f "$f" ] && { echo "===== $f"; tail -c 300000 "$f"; }; done > "$OUT/runs.log"
python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
reps = {}
for d in sorted([*(out / "work").glob("reports-*"), *(out / "work-server").glob("reports-*")]):
    for r in sorted(d.glob("status-*.json")):
        try: reps[f"{d.parent.name}/{d.name}/{r.name}"] = json.loads(r.read_text())
        except Exception as e: reps[f"{d.parent.name}/{d.name}/{r.name}"] = repr(e)
(out / "reports.json").write_text(json.dumps(reps, indent=1))
PY
rm -rf "$OUT/work" "$OUT/work-server"
stamp "e2e exit code $rc"
exit "$rc"
