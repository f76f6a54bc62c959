#!/usr/bin/env bash
# Device runner of issue 26's sizing evidence: real `launch_server` starts at memory-tight settings, plugin off and
# on, one variant after the other; each server is stopped as soon as it has sized its pools and logged
# max_running_requests (no requests: the sizing is what is measured here; the md5 proofs are run_e2e.sh's). Test
# infrastructure, not part of the package.
#
#   bash tools/gpu-engine/run_memory.sh            # carry [".whl", ".stub"]; VARIANTS picks rows (default: all)
#
# Each server's launch flags go to $WORK/<variant>-<mode>.argv (one per line, the model path as given) beside its
# log; record_memory.py runs the planner on the same flags afterwards (on any machine: `plan -- <flags>` with
# the log's free memory at load), so the planner column is the CPU's prediction for the very launch that ran.
# A variant is `name|preset|flags...[|modes]` (modes: "off", "on" or "off on"; default $MODES); LIFT_FRACTION=F adds the row `lift` (the default launch at fraction F,
# plugin on: the fraction the planner printed must admit every request asked for).
# Comes back (at most 8 files): logs.tar.gz (every log and argv file), memory-lines.txt (SGLang's and the plugin's
# memory lines), console.txt, gpu-apps.csv (nvidia-smi every 2 s).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/memory-out}
WORK=${MEMORY_WORK:-/tmp/memory-work}
mkdir -p "$OUT"
rm -rf "$WORK" && mkdir -p "$WORK"
T0=$(date +%s)
stamp() { echo "[run_memory +$(( $(date +%s) - T0 ))s] $*"; }
source tools/gpu-engine/_setup.sh  # wheels, the plugin, the stand-ins, $OUT/env.txt
export SMD_PROBE_LOAD=${SMD_PROBE_LOAD:-1}  # a "[load-probe]" line per model load (standins/probes.py)
export SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=${SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND:-python}
( timeout "${MEMORY_SAMPLE_S:-590}" nvidia-smi --query-compute-apps=timestamp,pid,used_memory --format=csv,noheader -l 2 \
    > "$OUT/gpu-apps.csv" 2>&1 & )

model() { echo "/tmp/smd-model-$1"; }
for preset in qwen3.5-0.8b nemotron-h-mini; do
  [ -f "$(model $preset)/config.json" ] || python3 -P -m sglang_mamba_dedup.e2e.random_model "$(model $preset)" --preset "$preset" >/dev/null
done
# The e2e's deployment flags for the stand-ins (decode CUDA graphs on, prefill graphs off, Triton/torch paths)
common=(--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1
  --speculative-num-draft-tokens 4 --random-seed 0 --max-running-requests "${MAX_RUNNING:-256}" --skip-tokenizer-init
  --attention-backend triton --sampling-backend pytorch --grammar-backend none --linear-attn-prefill-backend triton
  --tp-size 1 --cuda-graph-backend-decode full --cuda-graph-backend-prefill disabled)
DEFAULT_VARIANTS=(
  "default-0.15|qwen3.5-0.8b|--mem-fraction-static 0.15"
  "replayssm-0.15|qwen3.5-0.8b|--mem-fraction-static 0.15 --enable-linear-replayssm-spec"
  "default-0.3|qwen3.5-0.8b|--mem-fraction-static 0.3"
  "replayssm-0.3|qwen3.5-0.8b|--mem-fraction-static 0.3 --enable-linear-replayssm-spec"
  "no-radix-0.15|qwen3.5-0.8b|--mem-fraction-static 0.15 --disable-radix-cache"
  "no-overlap-0.15|qwen3.5-0.8b|--mem-fraction-static 0.15 --disable-overlap-schedule"
  "nemotron-0.15|nemotron-h-mini|--mem-fraction-static 0.15 --disable-flashinfer-autotune"
)
# VARIANTS=zc-radix (alone): issue 50 item 6, zero-copy with the radix cache on (served by default; the radix
# opt-out unset for these servers), plugin on, one server per model; then here: python3 -P tools/gpu-engine/record_memory.py OUT WORKDIR
# (WORKDIR: logs.tar.gz unpacked; docs/memory.md)
if [ "${VARIANTS:-}" = zc-radix ]; then
  unset SGLANG_MAMBA_DEDUP_ZERO_COPY_RADIX
  VARIANTS="zc-radix-0.2|qwen3.5-0.8b|--mem-fraction-static 0.2 --enable-mamba-zero-copy-commit|on"
  VARIANTS+=";zc-radix-nemotron-0.15|nemotron-h-mini|--mem-fraction-static 0.15 --disable-flashinfer-autotune"
  VARIANTS+=" --enable-mamba-zero-copy-commit|on"
fi
if [ -n "${VARIANTS:-}" ]; then IFS=';' read -r -a variants <<< "$VARIANTS"; else variants=("${DEFAULT_VARIANTS[@]}"); fi
[ -n "${LIFT_FRACTION:-}" ] && variants+=("lift|qwen3.5-0.8b|--mem-fraction-static $LIFT_FRACTION")
MODES=${MODES:-off on}

serve() {  # serve NAME MODE ARGV... : start, wait for the sizing lines, stop
  local name=$1 mode=$2; shift 2
  if (( $(date +%s) - T0 > ${MEMORY_BUDGET_S:-470} )); then  # leave time for the files within a 10-minute call
    stamp "$name $mode: not started (MEMORY_BUDGET_S=${MEMORY_BUDGET_S:-470} s spent)"; return
  fi
  local log="$WORK/$name-$mode.log" port=$(( 30000 + RANDOM % 20000 )) flag=() pid t
  printf '%s\n' "$@" > "$WORK/$name-$mode.argv"
  [ "$mode" = on ] && flag=(--enable-mamba-conv-dedup)
  ( [ "$mode" = off ] && unset SGLANG_MAMBA_DEDUP; exec setsid python3 -P -m sglang.launch_server --host 127.0.0.1 \
      --port "$port" --log-level info "$@" ${flag[@]+"${flag[@]}"} ) > "$log" 2>&1 &
  pid=$!
  for ((t = 0; t < ${SERVE_TIMEOUT:-240}; t++)); do
    grep -q "max_running_requests=" "$log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  stamp "$name $mode: $(grep -o 'max_running_requests=[0-9]*' "$log" | head -1 || true) $(grep -o 'max_mamba_cache_size: [0-9]*' "$log" | head -1 || true) (${t}s)"
  kill -TERM -- "-$pid" 2>/dev/null
  for ((t = 0; t < 30; t++)); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$pid" 2>/dev/null
  pkill -KILL -f "sglang.launch_server --host 127.0.0.1 --port $port" 2>/dev/null
  for ((t = 0; t < 30; t++)); do  # the next server must see the GPU free, as a fresh launch would
    [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null)" ] && break
    sleep 1
  done
}

for v in "${variants[@]}"; do
  IFS='|' read -r name preset flags vmodes <<< "$v"
  # shellcheck disable=SC2206
  extra=($flags)
  for mode in ${vmodes:-$MODES}; do
    [ "$name" = lift ] && [ "$mode" = off ] && continue
    serve "$name" "$mode" --model-path "$(model "$preset")" --speculative-draft-model-path "$(model "$preset")" \
      "${common[@]}" "${extra[@]}"
  done
done 2>&1 | tee "$OUT/console.txt"

for f in "$WORK"/*.log; do
  echo "===== $(basename "$f")"
  grep -E "Load weight (begin|end)|KV Cache is allocated|Mamba Cache is allocated|ReplaySSM ring|max_total_num_tokens|Memory pool end|mamba memory ledger|mamba cache estimator|caps running requests|capped to|asked for|load-probe|Traceback|Error" "$f" | cut -c1-1500
done > "$OUT/memory-lines.txt"
tar -czf "$OUT/logs.tar.gz" -C "$WORK" . 2>/dev/null
stamp "done"
