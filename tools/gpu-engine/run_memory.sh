#!/usr/bin/env bash
# Device runner of issue 18's memory evidence: real launch_server runs at a memory-tight setting, plugin off and
# on, without and with --enable-linear-replayssm-spec, through the e2e's server route (run_e2e.sh, so the same
# environment, stand-ins and md5 check). Test infrastructure, not part of the package.
#
#   bash tools/gpu-engine/run_memory.sh        # carry [".whl", ".stub"]; 4 server starts (~6-7 minutes)
#
# MEM_FRACTION (0.15) and MAX_RUNNING (256) make the mamba pool cap the running requests on the random-weight
# Qwen3.5-0.8B + MTP (the planner, CPU: 69 stock / 70 plugin of 256 at 139.8 GB and 2 GB of weights);
# --log-level info keeps SGLang's own memory lines and the plugin's estimator, admission and ledger lines.
# The runs work in /tmp/memory-work; what comes back is at most 8 files under $OUT:
#   memory.md / memory.csv / memory.json  record_memory.py's table: per server SGLang's slots, running requests,
#                                         mamba cache, the plugin's ledger and admission lines, the static
#                                         budget, the peak GPU memory, and the planner's prediction beside them
#   memory-lines.txt                      every memory line of every server log, as logged
#   gpu-apps.csv                          nvidia-smi every 2 s: timestamp, pid, used_memory
#   console.txt                           the run_e2e.sh consoles and record_memory.py's output
#   logs.tar.gz                           the whole server logs, env and e2e summaries
# Exit status: the first nonzero of the variants' e2e runs (ReplaySSM's "not engaged", 2, excepted: SGLang's
# own commit runs there by design), else record_memory.py's (1 when a server's numbers could not be read).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/memory-out}
WORK=${MEMORY_WORK:-/tmp/memory-work}
VARIANTS=${VARIANTS:-default replayssm}
MAX_RUNNING=${MAX_RUNNING:-256}
MEM_FRACTION=${MEM_FRACTION:-0.15}
PRESET=qwen3.5-0.8b
mkdir -p "$OUT"
rm -rf "$WORK" && mkdir -p "$WORK"
( timeout "${MEMORY_SAMPLE_S:-580}" nvidia-smi --query-compute-apps=timestamp,pid,used_memory --format=csv,noheader -l 2 \
    > "$OUT/gpu-apps.csv" 2>&1 & )
rc=0
for variant in $VARIANTS; do
  extra=()
  [ "$variant" = replayssm ] && extra=(--engine-arg enable_linear_replayssm_spec=true)
  OUT="$WORK/$variant" E2E_PRESET=$PRESET E2E_KEEP_WORK=1 E2E_MAX_NEW_TOKENS=32 E2E_RUN_TIMEOUT=${E2E_RUN_TIMEOUT:-150} \
    bash "${E2E_RUNNER:-tools/gpu-engine/run_e2e.sh}" off,on --server --num-prompts 8 \
      --max-running-requests "$MAX_RUNNING" --mem-fraction-static "$MEM_FRACTION" --log-level info \
      ${extra[@]+"${extra[@]}"} > "$WORK/$variant.console.txt" 2>&1
  vrc=$?
  [ "$variant" = replayssm ] && [ "$vrc" = 2 ] && vrc=0
  [ "$rc" = 0 ] && rc=$vrc
  { echo "===== $variant (exit $vrc)"; cat "$WORK/$variant.console.txt"; } >> "$OUT/console.txt"
  tail -3 "$WORK/$variant.console.txt"
done
for variant in $VARIANTS; do
  for f in "$WORK/$variant"/work/run-*.log; do
    [ -f "$f" ] || continue
    echo "===== $variant $(basename "$f")"
    grep -E "Load weight (begin|end)|KV Cache|Mamba Cache is allocated|ReplaySSM ring|max_total_num_tokens|Memory pool end|mamba memory ledger|mamba cache estimator|caps running requests|avail mem" "$f" | cut -c1-1500
  done
done > "$OUT/memory-lines.txt"
# the planner runs on the CPU (no GPU visible, as on a laptop) on the random model's config.json (built by run_e2e.sh)
CUDA_VISIBLE_DEVICES= PYTHONPATH=/tmp/smd-meta:/tmp/site:$root/.stub python3 -P tools/gpu-engine/record_memory.py "$OUT" \
  --model-path "/tmp/smd-model-$PRESET" --max-running-requests "$MAX_RUNNING" --mem-fraction-static "$MEM_FRACTION" \
  $(for v in $VARIANTS; do echo "$v=$WORK/$v/work"; done) 2>&1 | tee -a "$OUT/console.txt"
mrc=${PIPESTATUS[0]}
[ "$rc" = 0 ] && rc=$mrc
tar -czf "$OUT/logs.tar.gz" -C "$WORK" --exclude='*.safetensors' . 2>/dev/null
[ "$(stat -c %s "$OUT/logs.tar.gz")" -le 15000000 ] || { echo "logs.tar.gz over 15 MB: left out"; rm -f "$OUT/logs.tar.gz"; }
exit "$rc"
