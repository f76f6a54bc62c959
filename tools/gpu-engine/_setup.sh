# Sourced by the device runners (run_e2e.sh, run_throughput.sh), never run alone: the environment of an e2e
# call on the lent H200. Test infrastructure, not part of the package. Expects `root` (the checkout, the current
# directory), `OUT` and a `stamp` function; it
#   1. installs the wheels of WHEEL_DIR (default .whl) into /tmp/site (skipped on a warm machine that has the
#      same wheels there); SGLANG_WHEEL=<wheel> runs that release instead, from its own folder (run_e2e.sh's
#      header says how),
#   2. installs the plugin from this checkout in its wheel layout with its `sglang.srt.plugins` entry point
#      (install-plugin.sh, into /tmp/smd-meta),
#   3. puts tools/gpu-engine on PYTHONPATH: its sitecustomize.py installs the stand-ins of FACTS §8 (standins/)
#      in every SGLang process, the spawned scheduler included,
#   4. writes the versions, the entry points and the GPU to $OUT/env.txt,
# and defines `standin_engine_args` (the Triton/torch engine options the stand-ins need, for
# `python -m sglang_mamba_dedup.e2e`) and `collect_outputs WORK LOG_GLOB LOG_OUT REPORTS_OUT [KEY_PREFIX]` (the logs of
# WORK matching LOG_GLOB into one file, every status report under WORK/reports-* into one JSON: what comes back from
# the device is at most 8 files).

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

# The Triton/torch engine options the stand-ins need (after the e2e's deployment defaults; a later
# --engine-arg wins).
standin_engine_args=(
  --engine-arg attention_backend=triton
  --engine-arg sampling_backend=pytorch
  --engine-arg grammar_backend=none
  --engine-arg linear_attn_prefill_backend=triton
  ${release_args[@]+"${release_args[@]}"}
  --engine-arg tp_size=1
)

collect_outputs() {  # collect_outputs WORK LOG_GLOB LOG_OUT REPORTS_OUT [KEY_PREFIX]
  # KEY_PREFIX given: the reports are added to REPORTS_OUT (if there) under "<KEY_PREFIX>reports-*/status-*.json"
  local work=$1 glob=$2 log_out=$3 reports_out=$4 prefix=${5:-} f
  # a log over 300 kB keeps its first 100 kB (the start-up: memory lines, patches) and its last 200 kB
  for f in "$work"/$glob; do
    [ -f "$f" ] || continue
    echo "===== $prefix$(basename "$f")"
    if [ "$(stat -c %s "$f")" -le 300000 ]; then cat "$f"; else
      head -c 100000 "$f"; echo; echo "[... $(( $(stat -c %s "$f") - 300000 )) bytes left out ...]"; tail -c 200000 "$f"
    fi
  done > "$log_out"
  python3 - "$work" "$reports_out" "$prefix" <<'PY'
import json, pathlib, sys
work, dest, prefix = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
reps = json.loads(dest.read_text()) if prefix and dest.exists() else {}
for d in sorted(work.glob("reports-*")):
    for r in sorted(d.glob("status-*.json")):
        try: reps[f"{prefix}{d.name}/{r.name}"] = json.loads(r.read_text())
        except Exception as e: reps[f"{prefix}{d.name}/{r.name}"] = repr(e)
dest.write_text(json.dumps(reps, indent=1))
PY
}
