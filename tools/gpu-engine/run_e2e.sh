#!/usr/bin/env bash
# Device runner of the end-to-end md5 check on the lent H200. Test infrastructure, not part of the package.
#
#   bash tools/gpu-engine/run_e2e.sh [MODES] [extra `sglang-mamba-dedup e2e` options ...]
#
# MODES defaults to off,on,fault: every proof runs the negative control too (the plugin on with its commit
# deliberately broken, SGLANG_MAMBA_DEDUP_FAULT=commit_step0, patches/faults.py). The exit status
# is the e2e's: 0 only when off == on, the plugin engaged and the fault run differs ("negative control
# caught"); 6 when the fault run gives the same md5.
#
# Run from the repository root through the device `run` tool with carry [".whl", ".stub"] (the 37 wheels
# of SGLang 0.5.23 and the sgl_kernel stand-in, ../shared/gpu/README.md). WHEEL_DIR (default .whl) names
# another carried wheel folder, e.g. for SGLang 0.5.13.post1 (carry [".whl513", ".stub"]):
#   WHEEL_DIR=.whl513 SGLANG_WHEEL=.whl513/sglang-0.5.13.post1-cp312-cp312-manylinux_2_34_x86_64.whl \
#     bash tools/gpu-engine/run_e2e.sh off,on
# It
#   1.-3. sets up the environment (tools/gpu-engine/_setup.sh: the wheels into /tmp/site, the plugin with its
#      `sglang.srt.plugins` entry point into /tmp/smd-meta, checked through SGLang's own entry-point lookup,
#      the stand-ins of FACTS §8 in every SGLang process),
#   4. runs the e2e driver on a random-weight model (MTP included) with NEXTN, with the Triton/torch engine
#      options the stand-ins need; logs, results and reports go to $OUT. E2E_PRESET picks the random model's
#      preset (default qwen3.5-0.8b; nemotron-h-mini / nemotron-h-mini-bf16: Mamba2, Nemotron-H-8B's state),
#      built once per preset into /tmp/smd-model-<preset>. E2E_SERVER_TOO=1 runs the launch_server route
#      (off,on) after the offline runs, with the same options; the exit status is the first nonzero.
#      E2E_KEEP_WORK=1 keeps the workdirs ($OUT/work*, whole logs and status reports) for the caller.
#
# Proofs of issue 50 item 4 (zero-copy with the radix cache on; docs/e2e.md, "Zero-copy with the radix cache on"):
# E2E_PROOF=<name> adds that proof's options (MODES stays off,on,fault), one 10-minute device call each; with
# E2E_PRESET=nemotron-h-mini the same proof on Nemotron-H (Mamba2):
#   radix-default     --zero-copy, SGLang's default strategy (auto -> extra_buffer with overlap)
#   radix-lazy        ... --mamba-radix-cache-strategy extra_buffer_lazy
#   radix-no-overlap  ... --disable-overlap-schedule --mamba-radix-cache-strategy extra_buffer
#   radix-interval    ... --mamba-track-interval 64 (Nemotron-H: 128, its mamba_chunk_size; E2E_TRACK_INTERVAL)
#   radix-pressure    ... the interval lowered, --max-running-requests 16 and a small mamba pool
#                     (max_mamba_cache_size E2E_MAMBA_CACHE, default 96): tree states are evicted to admit requests;
#                     the call exits 10 when the on run's schedulers count no eviction (zc_tree_evictions)
#   radix-retract     ... the interval lowered, SGLANG_TEST_RETRACT=1 (SGLang's test switch: a decode retraction
#                     every 3 forward steps); the call exits 10 when no run log shows "#retracted_reqs: N", N > 0
#   radix-sessions    ... --streaming-sessions (a streaming session with the radix cache on)
#   radix-stress      radix-pressure and radix-retract in one run (one device call less): the interval lowered, the
#                     small pool and SGLANG_TEST_RETRACT=1; exits 10 unless the on run evicted AND a run retracted
# The negative control of every proof is E2E_FAULT (default zc_no_track where the plugin has it, else
# zc_no_stage_in; radix-sessions: zc_no_stage_in, its second turns read no tree state). A proof's e2e verdict
# requires off == on, the fault run different, zero-copy engaged, commits with a track set served zero-copy > 0
# (zc_track_commits) and round 2 cached tokens > 0 in every run.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/e2e-out}
mkdir -p "$OUT"
MODES=${1:-off,on,fault}
shift || true
T0=$(date +%s)
stamp() { echo "[run_e2e +$(( $(date +%s) - T0 ))s] $*"; }

PROOFS="radix-default radix-lazy radix-no-overlap radix-interval radix-pressure radix-retract radix-sessions radix-stress"
# before minutes of setup: exactly one of the proofs (a substring such as two names passed a pattern check and ran
# the default proof under their names), and a track interval that is a whole number >= 1
if [ -n "${E2E_PROOF:-}" ]; then
  known=0
  for p in $PROOFS; do [ "$E2E_PROOF" = "$p" ] && known=1; done
  if [ "$known" = 0 ]; then
    echo "run_e2e.sh: E2E_PROOF='$E2E_PROOF' is not one of: $PROOFS" >&2
    exit 2
  fi
fi
# a proof without its on run or its negative control proves nothing, yet its console would say PASS
if [ -n "${E2E_PROOF:-}" ] && { [[ ",$MODES," != *,on,* ]] || [[ ",$MODES," != *,fault,* ]]; }; then
  echo "run_e2e.sh: E2E_PROOF=$E2E_PROOF needs the modes on and fault (got '$MODES'; the default is off,on,fault)" >&2
  exit 2
fi
if [ -n "${E2E_TRACK_INTERVAL:-}" ] && ! [[ "$E2E_TRACK_INTERVAL" =~ ^[1-9][0-9]*$ ]]; then
  echo "run_e2e.sh: E2E_TRACK_INTERVAL='$E2E_TRACK_INTERVAL' is not a whole number >= 1" >&2
  exit 2
fi
# the CUDA-graph replays the runs made, padded or not (standins/probes.py; one line per new combination)
export SMD_PROBE_PAD=${SMD_PROBE_PAD:-1}
source tools/gpu-engine/_setup.sh  # wheels, the plugin, the stand-ins, $OUT/env.txt, standin_engine_args
stamp "environment ready; running e2e (modes $MODES)"

PRESET=${E2E_PRESET:-qwen3.5-0.8b}
proof_args=()
if [ -n "${E2E_PROOF:-}" ]; then
  if [ "$E2E_PROOF" = radix-sessions ]; then
    # a session's second turn continues from the state the session kept, not from a tree state, and round 1 read
    # no stale tree state in the radix proofs (their zc_no_track runs first differed in round 2): zc_no_track could
    # leave this proof's outputs equal; a stage-in dropped changes the first verify of every turn
    default_fault=zc_no_stage_in
  else
    default_fault=$(python3 -P -c 'from sglang_mamba_dedup.patches import faults; print("zc_no_track" if "zc_no_track" in faults.FAULTS else "zc_no_stage_in")')
  fi
  fault=${E2E_FAULT:-$default_fault}
  case "$PRESET" in nemotron-h*) interval=${E2E_TRACK_INTERVAL:-128} ;; *) interval=${E2E_TRACK_INTERVAL:-64} ;; esac
  # the budget under which the e2e starts its next run: a streaming-session run takes ~145 s (batch 1, 2026-12-03:
  # 436 s for three), so at 420 its fault run would not start and the proof could not pass; 520 for the others: on a
  # cold H100 (2026-12-05) Nemotron-H's first run took 171 s (Triton compiles), and at 420 the fault run was left out
  # (248 s + 1.1 x 171 s) although it takes ~60 s warm (a proof without its fault run fails: "no 'fault' run")
  budget=520
  [ "$E2E_PROOF" = radix-sessions ] && budget=560
  proof_args=(--zero-copy --fault "$fault" --time-budget "${E2E_TIME_BUDGET:-$budget}")
  # the proofs at SGLang's default track interval (256) generate 320 tokens, so round 1's decode crosses it and
  # round 2 reads a decode-tracked state back (the verdict needs both: zc_track_rows > 0, and round 2's cached tokens
  # beyond round 1's prompts)
  case "$E2E_PROOF" in radix-default|radix-lazy|radix-no-overlap) new_tokens=320 ;; esac
  case "$E2E_PROOF" in
    radix-default) ;;
    radix-lazy) proof_args+=(--mamba-radix-cache-strategy extra_buffer_lazy) ;;
    radix-no-overlap) proof_args+=(--disable-overlap-schedule --mamba-radix-cache-strategy extra_buffer) ;;
    radix-interval) proof_args+=(--mamba-track-interval "$interval") ;;
    radix-pressure) proof_args+=(--mamba-track-interval "$interval" --max-running-requests 16
                                 --engine-arg "max_mamba_cache_size=${E2E_MAMBA_CACHE:-96}") ;;
    radix-retract) proof_args+=(--mamba-track-interval "$interval"); export SGLANG_TEST_RETRACT=1 ;;
    radix-sessions) proof_args+=(--streaming-sessions) ;;
    radix-stress) proof_args+=(--mamba-track-interval "$interval" --max-running-requests 16
                               --engine-arg "max_mamba_cache_size=${E2E_MAMBA_CACHE:-96}"); export SGLANG_TEST_RETRACT=1 ;;
  esac
  stamp "proof $E2E_PROOF on $PRESET: ${proof_args[*]}"
fi
preset_args=()
# Nemotron-H: SGLang 0.5.23 runs flashinfer's autotune in the warm-up for it (flashinfer is absent here)
case "$PRESET" in nemotron-h*) preset_args+=(--engine-arg disable_flashinfer_autotune=true) ;; esac
e2e() {
python3 -P -m sglang_mamba_dedup.e2e \
  --random-weights --random-preset "$PRESET" --random-weights-dir "/tmp/smd-model-$PRESET" \
  --max-new-tokens "${E2E_MAX_NEW_TOKENS:-${new_tokens:-128}}" \
  --mem-fraction-static 0.3 \
  --run-timeout "${E2E_RUN_TIMEOUT:-240}" \
  --workdir "$WD" \
  "${standin_engine_args[@]}" \
  ${preset_args[@]+"${preset_args[@]}"} \
  ${proof_args[@]+"${proof_args[@]}"} \
  "$@"
}
WD=$OUT/work e2e --modes "$MODES" --json-out "$OUT/summary.json" "$@" 2>&1 | tee "$OUT/e2e.txt"
rc=${PIPESTATUS[0]}  # the offline e2e's: the proof checks below judge its on run and end its console
src=0
if [ "${E2E_SERVER_TOO:-0}" = 1 ]; then
  stamp "e2e exit code $rc; launch_server route (off,on)"
  WD=$OUT/work-server e2e --server --modes off,on --json-out "$OUT/summary-server.json" "$@" 2>&1 | tee "$OUT/e2e-server.txt"
  src=${PIPESTATUS[0]}
fi
passed=$rc  # the e2e's own verdict, before a proof's event checks (each of them says what it missed)
if [ "${E2E_PROOF:-}" = radix-pressure ] || [ "${E2E_PROOF:-}" = radix-stress ]; then
  # the schedulers' own count (/get_server_info: zero_copy.zc_tree_evictions, mamba states the radix tree evicted
  # from a zero-copy pool) in the on run, the one off == on is about (a fault run's evictions prove nothing there);
  # none: the pressure proof proves nothing about evictions
  evicted=$(python3 -P -c 'import json,sys
d = json.load(open(sys.argv[1]))
def count(run):
    states = [s for s in (run.get("server_state") or []) if isinstance(s, dict)]
    got = [(s.get("zero_copy") or {}).get("zc_tree_evictions") for s in states]
    return sum(n for n in got if isinstance(n, int) and not isinstance(n, bool))
on = [count(r) for r in d.get("runs", []) if r.get("mode") == "on"]
print(min(on) if on else 0)' "$OUT/summary.json" 2>/dev/null || echo 0)
  stamp "mamba states the radix tree evicted under zero-copy in the on run: $evicted" | tee -a "$OUT/e2e.txt"
  if [ "$evicted" = 0 ] && [ "$passed" = 0 ]; then
    echo "RESULT: FAIL -- no tree eviction under zero-copy in the on run (zc_tree_evictions = 0): the pressure proof" \
      "proves nothing" | tee -a "$OUT/e2e.txt"
    rc=10
  fi
fi
if [ "${E2E_PROOF:-}" = radix-retract ] || [ "${E2E_PROOF:-}" = radix-stress ]; then
  # SGLang logs every retraction as a warning: "... #retracted_reqs: N, ..."; counted in the on run's log (run-<i>-on),
  # the run off == on is about, as the evictions above; no retraction there: the proof proves nothing
  retracted=$(cat "$OUT"/work/run-*-on.log 2>/dev/null | grep -o '#retracted_reqs: [0-9]*' | awk '{s += $2} END {print s + 0}')
  stamp "retracted requests in the on run (SGLANG_TEST_RETRACT=1): $retracted" | tee -a "$OUT/e2e.txt"
  if [ "$retracted" = 0 ] && [ "$passed" = 0 ]; then
    echo "RESULT: FAIL -- the on run's log shows no retraction (#retracted_reqs > 0): the retraction proof proves" \
      "nothing" | tee -a "$OUT/e2e.txt"
    rc=10
  fi
fi
[ "$rc" = 0 ] && rc=$src  # the server route's status where the offline proof passed
# keep what comes back small (at most 8 files): one log of all runs, one JSON of all status reports
collect_outputs "$OUT/work" 'run-*.log' "$OUT/runs.log" "$OUT/reports.json"
# which graph replays padded a batch (mode, real -> graph batch), per run
for f in "$OUT"/work/run-*.log; do
  [ -f "$f" ] || continue
  echo "graph replays of $(basename "$f" .log): $(grep -ho '\[pad-probe\] .*' "$f" | sed 's/\[pad-probe\] //' \
    | python3 -c 'import json,sys; r=[json.loads(l) for l in sys.stdin]; p=[x for x in r if x["padded"]]; print(len(r), "batch shapes (captures included),", len(p), "padded:", ", ".join(sorted({"%s %s->%s" % (x["mode"].split(".")[-1], x["raw_bs"], x["padded_bs"]) for x in p})) or "none")')"
done | tee -a "$OUT/e2e.txt"
if [ -d "$OUT/work-server" ]; then
  collect_outputs "$OUT/work-server" 'run-*.log' "$OUT/runs-server.log" "$OUT/reports.json" server/
fi
[ "${E2E_KEEP_WORK:-0}" = 1 ] || rm -rf "$OUT/work" "$OUT/work-server"  # run_memory.sh reads the whole logs
stamp "e2e exit code $rc"
exit "$rc"
