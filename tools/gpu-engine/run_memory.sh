#!/usr/bin/env bash
# Device runner of issue 18's memory evidence: real launch_server runs at a memory-tight setting, plugin off and
# on, without and with --enable-linear-replayssm-spec, through the e2e's server route (run_e2e.sh, so the same
# environment, stand-ins and md5 check). Test infrastructure, not part of the package.
#
#   bash tools/gpu-engine/run_memory.sh        # carry [".whl", ".stub"]; about 4 server starts (~6-7 minutes)
#
# MEM_FRACTION (0.15) and MAX_RUNNING (256) make the mamba pool cap the running requests on the random-weight
# Qwen3.5-0.8B + MTP; --log-level info keeps SGLang's own memory lines (weights, KV cache, mamba cache) and the
# plugin's estimator, admission and ledger lines in the server logs. Returns, per variant, the run_e2e.sh files
# under $OUT/<variant>/ and one memory.txt with every memory line of every server, and the peak GPU memory of
# every process (nvidia-smi every 2 s). Compare with the planner on the CPU for the same settings:
#   sglang-mamba-dedup plan --shape qwen3.5-0.8b --max-running-requests 256 --mem-fraction-static 0.15 \
#     --gpu-memory-gb <GPU GiB> --weights-gb <the log's weight memory> [--enable-linear-replayssm-spec]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/memory-out}
mkdir -p "$OUT"
( timeout "${MEMORY_SAMPLE_S:-580}" nvidia-smi --query-compute-apps=timestamp,pid,used_memory --format=csv,noheader -l 2 \
    > "$OUT/gpu-apps.csv" 2>&1 & )
rc=0
for variant in ${VARIANTS:-default replayssm}; do
  extra=()
  [ "$variant" = replayssm ] && extra=(--engine-arg enable_linear_replayssm_spec=true)
  OUT="$OUT/$variant" E2E_MAX_NEW_TOKENS=32 E2E_RUN_TIMEOUT=${E2E_RUN_TIMEOUT:-150} \
    bash tools/gpu-engine/run_e2e.sh off,on --server --num-prompts 8 \
      --max-running-requests "${MAX_RUNNING:-256}" --mem-fraction-static "${MEM_FRACTION:-0.15}" --log-level info \
      ${extra[@]+"${extra[@]}"} > "$OUT/$variant.console.txt" 2>&1
  vrc=$?
  # ReplaySSM: SGLang's own commit runs, so the "on" run is not engaged by design (exit 2)
  [ "$variant" = replayssm ] && [ "$vrc" = 2 ] && vrc=0
  [ "$rc" = 0 ] && rc=$vrc
  tail -5 "$OUT/$variant.console.txt"
done
for variant in ${VARIANTS:-default replayssm}; do
  for f in "$OUT/$variant"/runs*.log; do
    [ -f "$f" ] || continue
    echo "===== $variant $(basename "$f")"
    grep -E "=====|Load weight end|KV Cache is allocated|Mamba Cache is allocated|max_total_num_tokens|max_running_requests|capped|mamba memory ledger|mamba cache estimator|caps running requests|Memory pool end|avail mem" "$f" | cut -c1-1200
  done
done > "$OUT/memory.txt"
exit "$rc"
