#!/usr/bin/env bash
# Device runner of the end-to-end speed on the lent H200: `sglang-mamba-dedup e2e --server --throughput` (two
# launch_servers side by side, requests in pairs A B B A; docs/e2e.md), once per variant, in one device call.
# Test infrastructure, not part of the package.
#
#   bash tools/gpu-engine/run_throughput.sh [extra `sglang-mamba-dedup e2e` options ...]
#
# Run from the repository root through the device `run` tool with carry [".whl", ".stub"] (as run_e2e.sh; the
# environment comes from tools/gpu-engine/_setup.sh). Variants (VARIANTS, default "default replayssm"):
#   default    the deployment settings (decode CUDA graphs, radix cache: every commit with track slots);
#   replayssm  the same + --enable-linear-replayssm-spec (REPLAYSSM_ARGS). SGLang's ReplaySSM commit does not go
#              through our kernel (FACTS §11), so the e2e's engagement check fails there by design: exit 8 is
#              what this variant is expected to end with (md5 and runs fine; an md5 difference is exit 1).
# Each variant: a random-weight Qwen3.5-0.8B + MTP (built once, /tmp/smd-model), NEXTN 3/1/4, 34 prompts,
# BATCH1_PAIRS (30) batch-1 pairs of 256 new tokens and FULL_PAIRS (10) full-batch pairs of 34 x 128, within
# THROUGHPUT_BUDGET seconds (250, both starts included: the e2e's --time-budget starts no pair that would not
# fit and reports those left out). Measured 2026-12-01 on a fresh H200: the two starts took 144-164 s, 30 + 10
# pairs about 80 s more; both variants took 456 s in one call (210 s per variant left no timed pair).
#
# Returns (at most 8 files): throughput.txt (env + both variants' e2e output), throughput.md (the table of both
# variants), pairs.csv (one row per pair, `variant` column), summaries.json (the e2e summaries by variant),
# latest/e2e_pairs-<gpu>.csv and history.csv (one row per variant and phase, the benchmarks' CSV convention:
# benchmarks/_timing.py Recorder; copy both into benchmarks/results/), servers.log (the server logs) and
# reports.json (every status report). Exit status: the default variant's, else 1 when the replayssm variant
# ended other than 0 or 8.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/e2e-throughput-out}
mkdir -p "$OUT"
T0=$(date +%s)
stamp() { echo "[run_throughput +$(( $(date +%s) - T0 ))s] $*"; }

source tools/gpu-engine/_setup.sh  # wheels, the plugin, the stand-ins, $OUT/env.txt, standin_engine_args
VARIANTS=${VARIANTS:-default replayssm}
REPLAYSSM_ARGS=${REPLAYSSM_ARGS:---engine-arg enable_linear_replayssm_spec=true}
stamp "environment ready; variants: $VARIANTS"

{ cat "$OUT/env.txt"; echo; } > "$OUT/throughput.txt"
rm -f "$OUT/env.txt" "$OUT/pairs.csv" "$OUT/reports.json"
: > "$OUT/servers.log"
declare -A rcs
for variant in $VARIANTS; do
  extra=()
  [ "$variant" = replayssm ] && read -r -a extra <<< "$REPLAYSSM_ARGS"
  work="$OUT/work-$variant"
  rm -rf "$work" && mkdir -p "$work"
  stamp "variant $variant: ${extra[*]:-deployment settings}" | tee -a "$OUT/throughput.txt"
  python3 -P -m sglang_mamba_dedup.e2e \
    --random-weights --random-weights-dir /tmp/smd-model \
    --server --throughput --label "$variant" \
    --batch1-pairs "${BATCH1_PAIRS:-30}" --full-pairs "${FULL_PAIRS:-10}" \
    --max-new-tokens "${E2E_MAX_NEW_TOKENS:-128}" --batch1-tokens "${BATCH1_TOKENS:-256}" \
    --mem-fraction-static "${MEM_FRACTION:-0.3}" \
    --run-timeout "${E2E_RUN_TIMEOUT:-240}" \
    --time-budget "${THROUGHPUT_BUDGET:-250}" \
    --workdir "$work" --json-out "$work/summary.json" --csv-out "$work/pairs.csv" \
    "${standin_engine_args[@]}" \
    ${extra[@]+"${extra[@]}"} \
    "$@" 2>&1 | tee -a "$OUT/throughput.txt"
  rcs[$variant]=${PIPESTATUS[0]}
  stamp "variant $variant: e2e exit code ${rcs[$variant]}" | tee -a "$OUT/throughput.txt"
  collect_outputs "$work" 'server-*.log' "$work/servers.log" "$OUT/reports.json" "$variant/"
  cat "$work/servers.log" >> "$OUT/servers.log"
  if [ -f "$work/pairs.csv" ]; then
    if [ -f "$OUT/pairs.csv" ]; then tail -n +2 "$work/pairs.csv" >> "$OUT/pairs.csv"; else cp "$work/pairs.csv" "$OUT/pairs.csv"; fi
  fi
done

# the summaries by variant, the table of both, the per-phase rows in the benchmarks' CSV convention
python3 -P tools/gpu-engine/record_throughput.py "$OUT" $(for v in $VARIANTS; do echo "$v=$OUT/work-$v/summary.json"; done) \
  2>&1 | tee -a "$OUT/throughput.txt"
for variant in $VARIANTS; do rm -rf "$OUT/work-$variant"; done

rc=${rcs[default]:-0}
for variant in $VARIANTS; do
  [ "$variant" = default ] && continue
  r=${rcs[$variant]}
  [ "$r" = 0 ] || { [ "$variant" = replayssm ] && [ "$r" = 8 ]; } || { [ "$rc" = 0 ] && rc=1; }
done
stamp "exit codes: $(for v in $VARIANTS; do printf '%s=%s ' "$v" "${rcs[$v]}"; done)-> $rc" | tee -a "$OUT/throughput.txt"
exit "$rc"
