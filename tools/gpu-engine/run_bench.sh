#!/usr/bin/env bash
# Device runner of the GPU tests and the whole-call commit benchmark on the lent H200 (test infrastructure).
#
#   bash tools/gpu-engine/run_bench.sh [STEPS]      # STEPS: comma list of tests,pairs,matrix (default: all)
#
# Carry [".whl", ".stub", ".old"]: the SGLang 0.5.23 wheels and the sgl_kernel stand-in (as run_e2e.sh), and
# for `pairs` an older plugin build in .old/ (`git archive <commit> sglang_mamba_dedup patches pyproject.toml`).
#   tests   the kernel tests compiled on the GPU (the CUDA-only ones included), then the integration simulations;
#   pairs   benchmarks/bench_commit_call.py with the .old build and this checkout alternating, 3 processes each
#           (host overhead of this build vs the older one, same inputs, same machine, interleaved);
#   matrix  benchmarks/bench_commit_call.py over both models, D in {2,4,8}, accept and accept + track;
#   zc      the zero-copy proof on CUDA (the kernel simulation through SGLang's kernels, compiled, and the
#           zero-copy commit kernel's tests, the CUDA-only direct-launch one included; log in $OUT/pytest_zc.log), then the commit call of the .old build and this one alternating, twice
#           (Qwen3.5-0.8B, batch 1 and 64: the zero-copy call's host cost before and after a change).
# Results: $OUT/history.csv (the tree's benchmarks/results/history.csv with this run's rows appended) and
# $OUT/latest/commit_call-<label>-<gpu>.csv (matrix); copy both over benchmarks/results/. The device has no git:
# BENCH_COMMIT=<sha> names this checkout's commit in the history, OLD_COMMIT=<sha> the .old build's.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/bench-out}
mkdir -p "$OUT"
STEPS=${1:-tests,pairs,matrix}
T0=$(date +%s)
stamp() { echo "[run_bench +$(( $(date +%s) - T0 ))s] $*"; }
deps=$(ls .whl/*.whl | grep -v -E "/(transformers|tokenizers|huggingface_hub)-")
if [ "$(cat /tmp/site/.smd-ok 2>/dev/null)" != "$(basename -a $deps)" ]; then  # same marker as run_e2e.sh
  rm -rf /tmp/site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $deps \
    >/tmp/smd-pip.log 2>&1 && basename -a $deps > /tmp/site/.smd-ok || { stamp "wheel install failed"; tail -20 /tmp/smd-pip.log; exit 90; }
  stamp "wheels installed"
fi
bash tools/gpu-engine/install-plugin.sh || exit 91
[ -d .old ] && { bash tools/gpu-engine/install-plugin.sh .old /tmp/smd-old || exit 92; }
new=/tmp/smd-meta:/tmp/site:$root/.stub
old=/tmp/smd-old:/tmp/site:$root/.stub
status=0
if [[ ,$STEPS, == *,tests,* ]]; then
  # Kernel tests compiled on CUDA; the integration simulations set TRITON_INTERPRET for SGLang's kernels on CPU
  # tensors, so they run in their own process with the GPU hidden (mixed in one process, SGLang's kernels get
  # interpreted on CUDA tensors). Logs stay in /tmp: at most 8 files come back from $OUT.
  stamp "GPU tests"
  # Against the installed build, from a copy of tests/ outside the checkout: pytest puts the folder above the
  # `tests` package first on sys.path, and in the checkout that folder holds the uninstalled source tree
  # (whose sglang_mamba_dedup has no patches/ subpackage: it is mapped in only when installed).
  rm -rf /tmp/smd-tests && mkdir -p /tmp/smd-tests && cp -r tests /tmp/smd-tests/ && cd /tmp/smd-tests
  PYTHONPATH=$new timeout 300 python3 -P -m pytest -q -n 8 -p no:cacheprovider tests/kernels/test_state_commit.py \
    tests/kernels/test_conv_commit.py tests/kernels/test_ssm_commit.py tests/kernels/test_tail_copy.py tests/kernels/test_bad_arguments.py \
    > /tmp/pytest_gpu.log 2>&1 || status=1
  tail -3 /tmp/pytest_gpu.log
  # The direct launch of the compiled kernel runs only on CUDA: its test alone, unsandboxed output; this
  # recipe fails loudly when the test was skipped or counted no direct launch.
  PYTHONPATH=$new timeout 120 python3 -P -m pytest -q -s -p no:cacheprovider -rA \
    "tests/kernels/test_state_commit.py::test_fused_commit_direct_launch_is_used_and_exact" > /tmp/pytest_direct.log 2>&1 || status=1
  direct=$(grep -oE '\[direct launches: [0-9]+\]' /tmp/pytest_direct.log | grep -oE '[0-9]+' | tail -1)
  if grep -q "PASSED tests/kernels/test_state_commit.py::test_fused_commit_direct_launch_is_used_and_exact" /tmp/pytest_direct.log \
     && [ "${direct:-0}" -gt 0 ]; then
    stamp "direct launch exercised: $direct direct launches"
  else
    stamp "FAIL: the direct launch did not run (direct launches: ${direct:-none})"; tail -20 /tmp/pytest_direct.log; status=1
  fi
  PYTHONPATH=$new CUDA_VISIBLE_DEVICES= timeout 300 python3 -P -m pytest -q -n 8 -p no:cacheprovider \
    tests/integration/test_commit_sim.py tests/integration/test_qwen35_smoke.py > /tmp/pytest_sim.log 2>&1 || status=1
  tail -3 /tmp/pytest_sim.log
  cd "$root"
fi
if [[ ,$STEPS, == *,pairs,* ]] && [ -d /tmp/smd-old ]; then
  [ -f "$OUT/history.csv" ] || cp benchmarks/results/history.csv "$OUT/history.csv"
  n0=$(wc -l < "$OUT/history.csv")  # the rows after these lines are this step's
  for i in 1 2 3; do
    for b in old new; do
      stamp "pair $i: $b build"
      pp=$old; commit=${OLD_COMMIT:-unknown}
      [ $b = new ] && { pp=$new; commit=${BENCH_COMMIT:-unknown}; }
      BENCH_COMMIT=$commit PYTHONPATH=$pp timeout 120 python3 -P benchmarks/bench_commit_call.py --out "$OUT" \
        --label "$b$i" --batches 1,16,64 --rounds 3 --calls 60 2>&1 | grep -E '^\| ' | grep -v -- '---' || status=1
    done
  done
  rm -f "$OUT"/latest/commit_call-old[0-9]-*.csv "$OUT"/latest/commit_call-new[0-9]-*.csv  # their rows: history.csv
  python3 - "$OUT/history.csv" "$n0" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))[int(sys.argv[2]) - 1 :]
print("\n| batch | track | build | plugin host us (median of 3 processes, min-max) | plugin call us | SGLang call us |\n|---|---|---|---|---|---|")
keys = sorted({(int(r["batch"]), r["track"]) for r in rows})
for b, t in keys:
    for build in ("old", "new"):
        sel = [r for r in rows if int(r["batch"]) == b and r["track"] == t and r["label"].startswith(build)]
        if not sel: continue
        h = [float(r["ours_host_us"]) for r in sel]; c = [float(r["ours_us"]) for r in sel]; s = [float(r["sglang_us"]) for r in sel]
        print(f"| {b} | {t} | {build} | {statistics.median(h):.1f} ({min(h):.1f}-{max(h):.1f}) | {statistics.median(c):.1f} | {statistics.median(s):.1f} |")
PY
fi
if [[ ,$STEPS, == *,matrix,* ]]; then
  stamp "matrix"
  PYTHONPATH=$new timeout 240 python3 -P benchmarks/bench_commit_call.py --out "$OUT" --label qwen35 \
    --models qwen3.5-0.8b --batches 1,16,64,128,256 --draft-tokens 2,4,8 --rounds 3 --calls 60 2>&1 | grep -v -E "^\{|Warning|warn" || status=1
  PYTHONPATH=$new timeout 200 python3 -P benchmarks/bench_commit_call.py --out "$OUT" --label qwen3next \
    --models qwen3-next-80b --batches 1,64 --draft-tokens 2,4,8 --rounds 3 --calls 60 2>&1 | grep -v -E "^\{|Warning|warn" || status=1
fi
if [[ ,$STEPS, == *,zc,* ]]; then
  stamp "zero-copy on CUDA"
  rm -rf /tmp/smd-tests && mkdir -p /tmp/smd-tests && cp -r tests /tmp/smd-tests/ && cd /tmp/smd-tests
  # tools/gpu-engine on the path: its sitecustomize stands in for sgl_kernel where SGLang's backends import it
  PYTHONPATH=$new:$root/tools/gpu-engine timeout 240 python3 -P -m pytest -q -p no:cacheprovider -rA \
    tests/zero_copy/test_zero_copy_kernels.py tests/kernels/test_zero_copy_commit.py > "$OUT/pytest_zc.log" 2>&1 || status=1
  grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed" "$OUT/pytest_zc.log" | tail -25
  cd "$root"
  [ -f "$OUT/history.csv" ] || cp benchmarks/results/history.csv "$OUT/history.csv"
  for i in 1 2; do
    for b in old new; do
      [ $b = old ] && [ ! -d /tmp/smd-old ] && continue
      stamp "zero-copy commit call, pair $i: $b build"
      pp=$old; commit=${OLD_COMMIT:-unknown}
      [ $b = new ] && { pp=$new; commit=${BENCH_COMMIT:-unknown}; }
      BENCH_COMMIT=$commit PYTHONPATH=$pp timeout 100 python3 -P benchmarks/bench_commit_call.py --out "$OUT" \
        --label "zc-$b$i" --models qwen3.5-0.8b --batches 1,64 --bytes-batches 1 --rounds 3 --calls 60 2>&1 \
        | grep -E '^\| |check' | grep -v -- '---' || status=1
    done
  done
fi
stamp "done (status $status)"
exit $status
