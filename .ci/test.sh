#!/usr/bin/env bash
# The project's test command (README "Test"). Builds, when missing, the base venv (SGLang 0.5.23) and one
# overlay per other release in sglang_mamba_dedup.versions.RELEASES (.ci/setup-env.sh), then runs
#   * the whole suite against SGLang 0.5.23, as two jobs: the tests not marked `release`, and those marked, and
#   * the release-level tests (marker `release`) against each of the other 14 releases, with that
#     release's real `sglang` package,
# two jobs at a time (CI has 2 cores), longest first, beside ruff (lint + format check) and mypy. The overlays are
# built in the background while the base release's jobs (which need none) run; a release's job waits for its
# overlay. Each job's log goes to .ci-logs/<job>.log and is printed when it ends; a summary table (with each
# job's wall time and the setup's) closes the output. Extra arguments are passed to every pytest run.
# docs/ci.md: where the time goes.
set -uo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
JOBS=${SMD_TEST_JOBS:-2}
t_start=$SECONDS
bash .ci/setup-env.sh || { echo "environment setup failed" >&2; exit 1; }  # the base venv (and lint tools)
mapfile -t releases < <(.venv/bin/python -c 'from sglang_mamba_dedup import versions; print("\n".join(versions.RELEASES))')
base=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("sglang"))')
rm -rf .ci-logs && mkdir -p .ci-logs
echo "=== base venv ready after $((SECONDS - t_start)) s"

# The jobs, longest first: the base release's tests not marked `release` (docs/ci.md), its release tests (the
# zero-copy tests run there only; it needs no overlay, so it runs while the overlays are built), then the other
# releases newest first (more of the release tests apply to newer releases: fewer skips, longer jobs).
others=()
for ((i = ${#releases[@]} - 1; i >= 0; i--)); do
  [ "${releases[i]}" = "$base" ] || others+=("${releases[i]}")
done
jobs=("$base-rest" "$base-release" "${others[@]}")

# the overlays, in the jobs' order, while the first jobs run
( bash .ci/setup-env.sh --overlays "${others[@]}" > .ci-logs/setup-overlays.log 2>&1
  echo $? > .ci-logs/.overlays-rc ) &
# lint beside the jobs; printed at the end
( t0=$SECONDS; lint=0
  echo "=== lint: ruff check, ruff format --check, mypy (config in pyproject.toml)"
  .venv/bin/ruff check . || lint=1
  .venv/bin/ruff format --check . || lint=1
  .venv/bin/mypy || lint=1
  echo "=== lint took $((SECONDS - t0)) s"
  echo $lint > .ci-logs/.lint-rc ) > .ci-logs/lint.log 2>&1 &
lint_pid=$!

job() {  # job NAME [pytest args...]: NAME is a release (its release tests) or $base-rest / $base-release
  local name=$1; shift
  local rel=$name sel=(-m release) what="release tests"
  case $name in
    "$base-rest") rel=$base sel=(-m "not release") what="tests not marked release" ;;
    "$base-release") rel=$base ;;
  esac
  local t0=$SECONDS rc=0 waited=0
  if [ "$rel" != "$base" ]; then  # its overlay, built by the background setup
    until [ -f ".venv/overlays/$rel/.stamp-v2" ] || [ -f .ci-logs/.overlays-rc ]; do sleep 2; done
    waited=$((SECONDS - t0))
    [ -f ".venv/overlays/$rel/.stamp-v2" ] \
      || { echo "no overlay for SGLang $rel: see .ci-logs/setup-overlays.log" > ".ci-logs/$name.log"; rc=1; }
  fi
  if [ "$rc" = 0 ]; then
    bash .ci/with-release.sh "$rel" python -m pytest -p no:cacheprovider "${sel[@]}" tests "$@" > ".ci-logs/$name.log" 2>&1
    rc=$?
  fi
  local last
  last=$(grep -E '^(=+ )?[0-9]+ (passed|failed)|no tests ran|error|no overlay' ".ci-logs/$name.log" | tail -1 | tr -d '=' | sed 's/^ *//')
  printf '%s\t%s\t%s\t%ss (%ss waiting for its overlay)\n' "$name" "$rc" "${last:-no summary}" "$((SECONDS - t0))" "$waited" > ".ci-logs/$name.result"
  ( flock 9; echo "=== SGLang $rel: $what (rc $rc)"; cat ".ci-logs/$name.log" ) 9>.ci-logs/.print-lock
}
export -f job
export base

printf '%s\n' "${jobs[@]}" | xargs -P "$JOBS" -I{} bash -c 'job "$@"' _ {} "$@"
wait "$lint_pid"
wait  # the overlay setup (done: every job waited for it)

echo
cat .ci-logs/lint.log
echo "=== overlay setup (exit $(cat .ci-logs/.overlays-rc 2>/dev/null || echo missing)):"
grep -E '^ready|does not import|error' .ci-logs/setup-overlays.log || true
echo
echo "=== summary (job, exit code, pytest summary, wall time); everything took $((SECONDS - t_start)) s"
status=0
[ "$(cat .ci-logs/.lint-rc 2>/dev/null)" = 0 ] || { echo "lint	1	ruff/mypy found problems (see above)"; status=1; }
for name in "${jobs[@]}"; do
  if [ -f ".ci-logs/$name.result" ]; then cat ".ci-logs/$name.result"; else echo "$name	missing"; status=1; fi
  [ "$(cut -f2 ".ci-logs/$name.result" 2>/dev/null)" = 0 ] || status=1
done
exit $status
