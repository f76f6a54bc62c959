#!/usr/bin/env bash
# Device runner of the live-modes decode-cycle benchmark (benchmarks/bench_live.py) on the lent H200, ONE model per
# call (issue 44): stock / plugin / zero-copy Engines alive at once, one worker process each, timed generates in
# palindromes, within a hard wall of LIVE_WALL_S (default 560 s) for the whole call.
#
#   bash tools/gpu-engine/run_cycle_live.sh [PRESET] [bench_live.py options ...]   # PRESET: qwen3.5-0.8b (default),
#                                                                                 # nemotron-h-mini
# e.g. two Engines per mode (six alive at once, 16 GiB static each), the host-state controls on:
#   bash tools/gpu-engine/run_cycle_live.sh qwen3.5-0.8b --engines-per-mode 2 --batches 1,16 --sleep-on-idle --pin --omp-threads 2
# (add --engine-arg 'cuda_graph_bs_decode=[1,16]' to shorten each Engine's start: six starts are 5-7 min of the wall;
# the harness starts the second set of Engines only when it and --min-timed-s (60) of generates fit the budget,
# else it runs with one Engine per mode and says "engines per mode cut to 1").
# Carry [".whl", ".stub"]. BENCH_COMMIT=<sha> names the commit (the device has no git). The harness gets
# --budget-s = what is left of the wall less 25 s (stopping the Engines, collecting the logs): it starts no palindrome
# that would end later and rewrites its CSVs after every batch, so a cut run still leaves clean files.
# Returns (at most 7 files): $OUT/cycle_live-<preset>.txt (the log and tables), $OUT/latest/cycle_generates-<gpu>.csv
# (one row per generate), $OUT/latest/cycle_live-<gpu>.csv (the summary), $OUT/history.csv,
# $OUT/cycle_live-<preset>-engines.log (every worker's log), $OUT/cycle_live-<preset>-reports.json (the plugin's
# status reports), $OUT/env.txt. The exit status is the harness's: 0 equal outputs and the plugin engaged, 1 an md5
# mismatch or a mode not engaged, 2 an Engine failed, 124/137 the hard wall.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/cycle-live-out}
mkdir -p "$OUT"
PRESET=${1:-qwen3.5-0.8b}
shift || true
T0=$(date +%s)
WALL=${LIVE_WALL_S:-560}
stamp() { echo "[run_cycle_live +$(( $(date +%s) - T0 ))s] $*"; }
source tools/gpu-engine/_setup.sh  # wheels, the plugin, the stand-ins, $OUT/env.txt, standin_engine_args
preset_args=()
case "$PRESET" in nemotron-h*) preset_args+=(--engine-arg disable_flashinfer_autotune=true) ;; esac
WORK=/tmp/bench-live
rm -rf "$WORK/$PRESET"
left=$(( WALL - ($(date +%s) - T0) ))
budget=$(( left - 25 ))
stamp "bench_live $PRESET: ${left}s of the wall left, budget ${budget}s"
timeout -k 5 $(( left - 12 )) python3 -P benchmarks/bench_live.py --preset "$PRESET" --out "$OUT" --work "$WORK" \
  --budget-s "$budget" "${standin_engine_args[@]}" ${preset_args[@]+"${preset_args[@]}"} "$@" 2>&1 | tee "$OUT/cycle_live-$PRESET.txt"
rc=${PIPESTATUS[0]}
collect_outputs "$WORK/$PRESET" "*.log" "$OUT/cycle_live-$PRESET-engines.log" "$OUT/cycle_live-$PRESET-reports.json"
{ echo "== GPU processes left after the run:"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>&1; } \
  | tee -a "$OUT/cycle_live-$PRESET.txt"
stamp "exit $rc"
exit "$rc"
