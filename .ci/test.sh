#!/usr/bin/env bash
# The project's test command (README "Test"). Builds, when missing, the base venv (SGLang 0.5.23) and one
# overlay per other release in sglang_mamba_dedup.versions.RELEASES (.ci/setup-env.sh), then runs
#   * the whole suite against SGLang 0.5.23, and
#   * the release-level tests (marker `release`) against each of the other 14 releases, with that
#     release's real `sglang` package,
# two jobs at a time (CI has 2 cores), after ruff (lint + format check) and mypy. Each job's log goes to .ci-logs/<release>.log and is printed when it
# ends; a summary table closes the output. Extra arguments are passed to every pytest run.
set -uo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
JOBS=${SMD_TEST_JOBS:-2}
bash .ci/setup-env.sh all || { echo "environment setup failed" >&2; exit 1; }
mapfile -t releases < <(.venv/bin/python -c 'from sglang_mamba_dedup import versions; print("\n".join(versions.RELEASES))')
base=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("sglang"))')
rm -rf .ci-logs && mkdir -p .ci-logs
lint=0
echo "=== lint: ruff check, ruff format --check, mypy (config in pyproject.toml)"
.venv/bin/ruff check . || lint=1
.venv/bin/ruff format --check . || lint=1
.venv/bin/mypy || lint=1

job() {  # job RELEASE [pytest args...]
  local rel=$1; shift
  local sel=(-m release)
  [ "$rel" = "$base" ] && sel=()
  local t0=$SECONDS
  bash .ci/with-release.sh "$rel" python -m pytest -p no:cacheprovider "${sel[@]}" tests "$@" > ".ci-logs/$rel.log" 2>&1
  local rc=$?
  local last
  last=$(grep -E '^(=+ )?[0-9]+ (passed|failed)|no tests ran|error' ".ci-logs/$rel.log" | tail -1 | tr -d '=' | sed 's/^ *//')
  printf '%s\t%s\t%s\t%ss\n' "$rel" "$rc" "${last:-no summary}" "$((SECONDS - t0))" > ".ci-logs/$rel.result"
  ( flock 9; echo "=== SGLang $rel: $([ "$rel" = "$base" ] && echo "all tests" || echo "release tests") (rc $rc)"; cat ".ci-logs/$rel.log" ) 9>.ci-logs/.print-lock
}
export -f job
export base

# the base release first (the longest job), then the others
printf '%s\n' "$base" "${releases[@]/$base}" | grep -v '^$' \
  | xargs -P "$JOBS" -I{} bash -c 'job "$@"' _ {} "$@"

echo
echo "=== summary (release, exit code, pytest summary, wall time)"
status=$lint
[ "$lint" = 0 ] || echo "lint	1	ruff/mypy found problems (see the top of the output)"
for rel in "${releases[@]}"; do
  if [ -f ".ci-logs/$rel.result" ]; then cat ".ci-logs/$rel.result"; else echo "$rel	missing"; status=1; fi
  [ "$(cut -f2 ".ci-logs/$rel.result" 2>/dev/null)" = 0 ] || status=1
done
exit $status
