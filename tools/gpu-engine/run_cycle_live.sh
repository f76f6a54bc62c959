#!/usr/bin/env bash
# Device runner of the live-modes decode-cycle benchmark (benchmarks/bench_live.py) on the lent H200, one model per
# call, issue 51's protocol (docs/benchmarks.md, "The decode cycle, the protocol"): stock and zero-copy, 3 Engines
# each, ONE ALIVE AT A TIME (bench_live's default since the 12-04 evening runs: alive at once with idle schedulers
# asleep was ~30 % slower and noisy), sleep-on-idle off, each Engine through batches 1/16/64/128: 2 warm-ups then gc
# frozen in every SGLang process, 8 timed generates of 128 tokens; radix cache off, SGLang's own CUDA-graph list,
# per-generate CPU and GPU probes, a start probe per Engine (affinity, NUMA, PYTHONHASHSEED, py-spy dump when on
# PATH). Within a hard wall of LIVE_WALL_S (default 580 s: a device command may run 600) per call.
#
# The protocol is two calls of the SAME command, issued back to back on one warm machine (one device command may
# run 10 minutes at most; the machine keeps /tmp while it stays warm):
#
#   LIVE_STEP=next BENCH_COMMIT=<sha> bash tools/gpu-engine/run_cycle_live.sh qwen3.5-0.8b     # carry [".whl", ".stub"]
#
#   call 1, step "A": run A, Engines s1 z1 z2 s2 s3 z3 in turn, its files kept in /tmp for call 2;
#   call 2, step "B": run B, the start order reversed (zero-copy, stock: z1 s1 s2 z2 z3 s3); then both runs' rows in
#          one set of files and the verdict over the Engine pairs of both runs, with and without the Engines the
#          whole-Engine slow-state rule flags (bench_live.py --combine), table at the end of the log, then a line
#          per batch whose runs are more than 1 % apart: did the GPU's work move, or the host's part of the wall.
#   Time per call, from the 12-04 evening runs: an Engine is ready 51-64 s after its worker starts (start_s 39-51 s;
#   92-111 s for the first Engine on a fresh machine, which compiles SGLang's Triton kernels), a round of the four
#   batches takes ~2.0 s (0.23 + 0.30 + 0.53 + 0.81..0.89 s), so 10 generates per batch ~20 s, stopping ~2 s: 74-86 s
#   per Engine, 6 Engines 444-516 s, plus setup ~30-60 s: 475-575 s of the 580 s wall. A set of modes (s1 z1) whose
#   Engines no longer fit the budget is not started (said, PARTIAL): a missing pair, never a half-timed one.
#   With --radix-cache (12-05 evening, an H100): ~100 s per Qwen3.5 Engine (a flush before every generate), so 4-5
#   Engines a call; Nemotron-H's six fit in 492 s on a machine warm from a call before. A fresh machine's first Engine
#   compiles in its warm-ups (47.5 s at batch 1 on Nemotron-H); the next Engines' estimate leaves that out.
#   --gpu-busy 1 (the runner's default since 12-05 night; LIVE_B=alive and LIVE_STEP=prime drop it): after each
#   Engine's timed generates, one profiled generate per batch gives the GPU's busy time beside the wall (~4.4 s each,
#   the trace's export: ~18 s more per Engine). On a fresh machine run A of a radix-on Qwen3.5 protocol then keeps one
#   set (s1 z1: 179 + 98 s with the first Engine's compiles, the next set's estimate ~260 s of the ~250 s left) where
#   it kept two without profiles; run B on the warm machine keeps two (the 12-05 audit's B1). A profile that fails
#   (no trace within 15 s, none of the GPU's activity in it, the Engine gone) is said once and ends the run's
#   profiles; the timed rows stand. Since 12-06 only the first Engine of each mode is profiled (--gpu-busy-engines 1):
#   the 12-06 calls timed 2 of 3 pairs, the GPU's busy time had agreed within 0.2 % in every Engine of four runs.
# LIVE_STEP=A|B runs that step (B needs A's files from this machine's /tmp and A's options: LIVE_STEP=next runs A
# again when the options differ, e.g. a radix-off run A before a radix-on protocol); LIVE_STEP=prime: one stock Engine,
# 3 warm-ups and 12 generates per batch (compiles the kernels; a one-alive stock reference; its log's line "the
# generates' noise" gives, per batch, the timed generates per mode each run would need to agree within 1 % on this
# host now: read it before spending two calls on a protocol, 12-06; LIVE_NOISE_GATE=N ends the prime with exit 5
# when that is over N at some batch, and marks no step: the pair that agreed on 12-05 needed 2-24, had 16; no
# Nemotron-H host of 12-05/12-06 passed N = 30, the quietest read 7-112); a single run as before:
#   bash tools/gpu-engine/run_cycle_live.sh [PRESET] [bench_live.py options ...]   # PRESET: qwen3.5-0.8b (default),
#                                                                                 # nemotron-h-mini
# LIVE_B=alive runs both steps' Engines alive at once instead (--alive-at-once, sleep-on-idle on; the 12-04 run A
# design), LIVE_B=pairs each set of modes alive together, timed in palindromes, one set after another (--pairs-alive:
# the 12-06 H100 host ran Python ~2x slower for spells of ~60 s, longer than a generate and shorter than an Engine,
# so a pair's modes must share them; benchmarks/host_speed.py; with the radix cache on two Engines get 32 GiB each,
# which on an H100 admits ~102 running requests: batch 128 is then not timed, so pass --batches 1,16,64 there, or
# --static-gb 48 on an H200), LIVE_B=sequential or auto (the default) keeps bench_live's sequential default.
# Options after PRESET go to every run of the protocol too (they win over the runner's --warmups 2 --reps 8), e.g.
# the later arms (issue 51 item 6), same protocol:
#   LIVE_STEP=next ... run_cycle_live.sh qwen3.5-0.8b --modes stock,replayssm   (or plugin, or no-spec; B reverses)
# Carry [".whl", ".stub"]. BENCH_COMMIT=<sha> names the commit (the device has no git). The harness gets
# --budget-s = what is left of the wall less 25 s (stopping the Engines, collecting the logs): it starts no Engine
# that would end later and rewrites its files after every Engine, so a cut run still leaves clean files.
# Returns (at most 8 files): $OUT/cycle_live-<preset>-<step>.txt (the log, the tables, the health checks; call 2:
# the combined verdict table at its end), $OUT/latest/cycle_generates-<gpu>.csv (one row per generate with its
# probes; call 2: runs A and B), $OUT/latest/cycle_live-<gpu>.csv (per run, batch and mode), call 2 also
# $OUT/latest/cycle_live_combined-<gpu>.csv (the verdict over both runs), $OUT/latest/cycle_live_runs-<gpu>.json (per
# run: the machine's header, each Engine's pids, graphs, graph pools and start probe, the health), $OUT/history.csv,
# $OUT/cycle_live-<preset>-engines.log (every worker's log), $OUT/cycle_live-<preset>-reports.json (the plugin's
# status reports). The exit status is the harness's: 0 equal outputs and the plugin engaged, 1 an md5 mismatch or a
# mode not engaged, 2 an Engine failed, 3 nothing timed for a mode, 4 no step left (LIVE_STEP=next after B),
# 5 the host check's gate or the prime's noise gate (below), 124/137 the hard wall.
# Before steps A, B and single: LIVE_HOST_S (default 20, 0: none) seconds of benchmarks/host_speed.py, its first
# lines in the output as "[host] ...", its tables at the log's end; LIVE_HOST_GATE=X (unset: no gate)
# ends the call there, exit 5, when the median sample is over X times the fastest (six reads on 12-06: x1.31-1.72,
# on hosts whose runs were 7-24 % apart; no quiet host measured with it, so X is a guess). The prime's
# LIVE_NOISE_GATE reads the noise that decides agreement instead: the generates' own (above).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/cycle-live-out}
mkdir -p "$OUT"
PRESET=${1:-qwen3.5-0.8b}
shift || true
T0=$(date +%s)
WALL=${LIVE_WALL_S:-580}
stamp() { echo "[run_cycle_live +$(( $(date +%s) - T0 ))s] $*"; }
# the preset names folders that are emptied (rm -rf): a plain name only
case "$PRESET" in .*|*/*|"") stamp "the preset must be a plain name (got '$PRESET')"; exit 2 ;; esac
case "$WALL" in ''|*[!0-9]*) stamp "LIVE_WALL_S must be whole seconds (got '$WALL')"; exit 2 ;; esac
case "${LIVE_B:-auto}" in auto|alive|sequential|pairs) ;; *) stamp "LIVE_B must be auto, alive, pairs or sequential (got '$LIVE_B')"; exit 2 ;; esac
STATE=/tmp/cycle-live-state/$PRESET  # survives between calls while the machine stays warm
STEP=${LIVE_STEP:-single}
# step B must run with run A's options (B reverses the modes itself) and design (LIVE_B: alive at once or one alive)
OPTS="LIVE_B=${LIVE_B:-auto} $(printf '%q ' "$@")"
a_opts() { cat "$STATE/A.options" 2>/dev/null; }
if [ "$STEP" = next ]; then
  if [ ! -f "$STATE/A.done" ]; then STEP=A
  elif [ "$(a_opts)" != "$OPTS" ]; then
    stamp "run A on this machine had other options ($(a_opts)): this call runs A with these ($OPTS)"; STEP=A
  elif [ ! -f "$STATE/B.done" ]; then STEP=B
  else stamp "A and B are done on this machine ($STATE): nothing to run (LIVE_STEP=A starts again)"; exit 4; fi
fi
case "$STEP" in single|prime|A|B) ;; *) stamp "LIVE_STEP must be next, prime, A or B (got $STEP)"; exit 2 ;; esac
if [ "$STEP" = B ] && { [ ! -f "$STATE/A.done" ] || ! ls "$STATE"/A/latest/cycle_generates-*.csv >/dev/null 2>&1; }; then
  stamp "step B needs run A's files from this machine ($STATE/A): the machine went back? run LIVE_STEP=next again"; exit 2
fi
if [ "$STEP" = B ] && [ "$(a_opts)" != "$OPTS" ]; then
  stamp "step B needs run A's options ($(a_opts)), got ($OPTS): the two runs would not be one protocol"; exit 2
fi
stamp "step $STEP ($PRESET)"
# the host first (not for a prime): LIVE_HOST_S seconds of benchmarks/host_speed.py, its summary in the log; with
# LIVE_HOST_GATE=X a host whose median sample is over X times its fastest ends the call here (exit 5, no Engine)
HOST_S=${LIVE_HOST_S:-20}
case "$HOST_S" in ''|*[!0-9]*) stamp "LIVE_HOST_S must be whole seconds (got '$HOST_S')"; exit 2 ;; esac
# its tables go to the end of the log (the files that come back are at most 8); a file of this call's own: two
# runners at once (the CI's parallel jobs) each emptied the other's at a fixed path
HOST_TXT=$(mktemp /tmp/cycle-live-host.XXXXXX)
trap 'rm -f "$HOST_TXT"' EXIT
if [ "$STEP" != prime ] && [ "$HOST_S" -gt 0 ]; then
  python3 -P benchmarks/host_speed.py --seconds "$HOST_S" ${LIVE_HOST_GATE:+--gate "$LIVE_HOST_GATE"} > "$HOST_TXT" 2>&1
  hrc=$?
  { head -3 "$HOST_TXT"; grep '^GATE' "$HOST_TXT"; } | sed 's/^/[host] /'
  [ "$hrc" = 5 ] && { stamp "LIVE_HOST_GATE=$LIVE_HOST_GATE: no run on this host now (step $STEP not started)"; exit 5; }
  [ "$hrc" != 0 ] && stamp "the host check failed (exit $hrc, at the log's end): going on without it"
fi
source tools/gpu-engine/_setup.sh  # wheels, the plugin, the stand-ins, $OUT/env.txt, standin_engine_args
preset_args=()
case "$PRESET" in nemotron-h*) preset_args+=(--engine-arg disable_flashinfer_autotune=true) ;; esac
WORK=/tmp/bench-live
rm -rf "$WORK/$PRESET"
run_id=$(date -u +%Y%m%dT%H%MZ)
step_args=()
modes_given=""
alive_given=""
for a in "$@"; do case "$a" in --modes|--modes=*) modes_given=1 ;; --alive-at-once) alive_given=1 ;; esac; done  # "--modes a,b" or "--modes=a,b"
case "$STEP" in
  prime) step_args=(--modes stock --engines-per-mode 1 --reps 12 --warmups 3 --run "$run_id-prime"
                    ${LIVE_NOISE_GATE:+--noise-gate "$LIVE_NOISE_GATE"}) ;;
  A) step_args=(--run "$run_id-A") ;;
  B) step_args=(--run "$run_id-B") ;;
esac
design_args=()
busy_args=(--gpu-busy 1 --gpu-busy-engines 1)  # the GPU's busy time beside the wall: one profiled generate per batch
# in the first Engine of each mode (since 12-06: it agreed within 0.2 % across Engines and runs; ~18 s per Engine saved)
[ "${LIVE_B:-auto}" = alive ] && { design_args=(--alive-at-once); busy_args=(); }  # profiles: one Engine alive only
[ "${LIVE_B:-auto}" = pairs ] && design_args=(--pairs-alive)  # each set of modes alive together, palindromes
[ -n "$alive_given" ] && busy_args=()  # the user's --alive-at-once too (bench_live refuses --gpu-busy with it)
[ "$STEP" = prime ] && busy_args=()  # a prime compiles the kernels: it is not analysed, its profiles would be waste
case "$STEP" in
  A|single) step_args+=(${design_args[@]+"${design_args[@]}"}) ;;  # a single run takes LIVE_B too (it ran one alive)
  B)
    step_args+=(${design_args[@]+"${design_args[@]}"})
    if [ -z "$modes_given" ]; then step_args+=(--modes zero-copy,stock)
    else  # the given modes reversed
      for ((i = 1; i <= $#; i++)); do
        case "${!i}" in
          --modes) j=$((i + 1)); rev=$(echo "${!j}" | tr ',' '\n' | tac | paste -sd,) ;;
          --modes=*) given=${!i}; rev=$(echo "${given#--modes=}" | tr ',' '\n' | tac | paste -sd,) ;;
        esac
      done
      step_args+=(--modes "$rev")
    fi
    mkdir -p "$OUT/latest"
    cp "$STATE"/A/latest/* "$OUT/latest/" && cp "$STATE/A/history.csv" "$OUT/" 2>/dev/null  # run A's rows first
    ;;
esac
left=$(( WALL - ($(date +%s) - T0) ))
budget=$(( left - 25 ))
log="$OUT/cycle_live-$PRESET.txt"
[ "$STEP" != single ] && log="$OUT/cycle_live-$PRESET-$STEP.txt"
stamp "bench_live $PRESET step $STEP: ${left}s of the wall left, budget ${budget}s"
# the user's options after the defaults, the step's last (they win: --run, --modes of run B)
# --omp-threads 1: one intra-op thread per SGLang process (hygiene, the review's call); --warmups 2 --reps 8: six
# Engines in one call (see the time above); --gpu-busy 1 (12-05 night: the host moved the wall, not the GPU's work;
# ~4.4 s more per Engine and batch, so fewer Engines a call); the user's options may change any of them
timeout -k 5 $(( left - 12 )) python3 -P benchmarks/bench_live.py --preset "$PRESET" --out "$OUT" --work "$WORK" \
  --budget-s "$budget" --omp-threads 1 --warmups 2 --reps 8 ${busy_args[@]+"${busy_args[@]}"} "${standin_engine_args[@]}" ${preset_args[@]+"${preset_args[@]}"} "$@" \
  ${step_args[@]+"${step_args[@]}"} 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$STEP" = B ]; then
  gens=$(ls "$OUT"/latest/cycle_generates-*.csv 2>/dev/null | head -1)
  { echo; echo "== run A and run B combined: the verdict over the Engine pairs of both runs"
    python3 -P benchmarks/bench_live.py --combine "$gens" --out "$OUT"; } 2>&1 | tee -a "$log"
  crc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] && rc=$crc  # a refused combination (a run that failed its checks, unlike runs) fails the step
fi
collect_outputs "$WORK/$PRESET" "*.log" "$OUT/cycle_live-$PRESET-engines.log" "$OUT/cycle_live-$PRESET-reports.json"
{ echo "== GPU processes left after the run:"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>&1
  echo "== env.txt"; cat "$OUT/env.txt"
  [ -s "$HOST_TXT" ] && { echo "== the host check before this step (benchmarks/host_speed.py, ${HOST_S} s)"; cat "$HOST_TXT"; }
  } 2>&1 | tee -a "$log"
rm -f "$OUT/env.txt"  # in the log: the files that come back are at most 8
if [ "$STEP" != single ] && [ "$rc" -eq 0 ]; then  # a clean run: the next step may follow
  mkdir -p "$STATE"
  if [ "$STEP" = A ]; then
    rm -rf "$STATE/A"; mkdir -p "$STATE/A"; cp -r "$OUT/latest" "$OUT/history.csv" "$STATE/A/"
    printf '%s' "$OPTS" > "$STATE/A.options"
  fi
  [ "$STEP" = prime ] && rm -f "$STATE/A.done" "$STATE/B.done"
  [ "$STEP" = A ] && rm -f "$STATE/B.done"
  touch "$STATE/$STEP.done"
fi
[ "$STEP" = prime ] && [ "$rc" -eq 5 ] && stamp "LIVE_NOISE_GATE=$LIVE_NOISE_GATE: this host is too noisy for runs that agree now (the prime's line 'the generates' noise'); give the machine back for another"
stamp "step $STEP exit $rc"
exit "$rc"
