#!/usr/bin/env bash
# Device runner of the decode-cycle benchmark (benchmarks/bench_cycle.py) on the lent H200, one model per call
# (issue 34: stock / plugin / zero-copy Engines, interleaved rounds, wall per Engine and a profiled cycle per mode).
#
#   bash tools/gpu-engine/run_cycle.sh [PRESET] [bench_cycle.py options ...]   # PRESET: qwen3.5-0.8b (default),
#                                                                             # nemotron-h-mini
# Carry [".whl", ".stub"]. CYCLE_TESTS=1 first runs the zero-copy proofs compiled on CUDA (the kernel tests of
# tests/kernels/test_zero_copy_commit.py and test_state_commit.py, then the kernel simulation through SGLang's own kernels,
# tests/zero_copy/test_zero_copy_kernels.py, and the padded batch with poisoned rows as a CUDA-graph replay,
# tests/zero_copy/test_zero_copy_padding_poison.py), logs in $OUT/pytest_zc.log. BENCH_COMMIT=<sha> names the commit.
# Returns $OUT/cycle-<preset>.txt (the tables), $OUT/latest/cycle_wall-<gpu>.csv, $OUT/latest/cycle_profile-<gpu>.csv,
# $OUT/history.csv, $OUT/env.txt. The exit status is the first nonzero of the tests and the benchmark.
# CYCLE_BENCH=0 (with CYCLE_TESTS=1) runs the proofs only; CYCLE_TESTS_K=<expr> selects among them (pytest -k).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/cycle-out}
mkdir -p "$OUT"
PRESET=${1:-qwen3.5-0.8b}
shift || true
T0=$(date +%s)
stamp() { echo "[run_cycle +$(( $(date +%s) - T0 ))s] $*"; }
source tools/gpu-engine/_setup.sh  # wheels, the plugin, the stand-ins, $OUT/env.txt, standin_engine_args
status=0
if [ "${CYCLE_TESTS:-0}" = 1 ]; then
  stamp "zero-copy proofs compiled on CUDA"
  rm -rf /tmp/smd-tests && mkdir -p /tmp/smd-tests && cp -r tests /tmp/smd-tests/ && cd /tmp/smd-tests
  PYTHONPATH=/tmp/smd-meta:/tmp/site:$root/.stub timeout "${CYCLE_TESTS_TIMEOUT:-240}" python3 -P -m pytest -q -p no:cacheprovider -rA tests/kernels/test_zero_copy_commit.py \
    "tests/kernels/test_state_commit.py::test_fused_commit_direct_launch_is_used_and_exact" \
    tests/zero_copy/test_zero_copy_kernels.py tests/zero_copy/test_zero_copy_padding_poison.py ${CYCLE_TESTS_K:+-k "$CYCLE_TESTS_K"} \
    > "$OUT/pytest_zc.log" 2>&1 || status=1
  grep -E "passed|failed|error" "$OUT/pytest_zc.log" | tail -3
  cd "$root"
fi
if [ "${CYCLE_BENCH:-1}" = 0 ]; then stamp "exit $status (CYCLE_BENCH=0: no benchmark)"; exit "$status"; fi
preset_args=()
case "$PRESET" in nemotron-h*) preset_args+=(--engine-arg disable_flashinfer_autotune=true) ;; esac
stamp "bench_cycle $PRESET"
timeout "${CYCLE_TIMEOUT:-520}" python3 -P benchmarks/bench_cycle.py --preset "$PRESET" --out "$OUT" \
  "${standin_engine_args[@]}" ${preset_args[@]+"${preset_args[@]}"} "$@" 2>&1 | tee "$OUT/cycle-$PRESET.txt"
rc=${PIPESTATUS[0]}
[ "$status" = 0 ] && status=$rc
stamp "exit $status"
exit "$status"
