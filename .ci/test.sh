#!/usr/bin/env bash
# The project's test command (README "Test"): builds both SGLang environments from scratch when they are
# missing, then runs the whole suite against SGLang 0.5.23 and the release-level tests (marker
# `release`) against SGLang 0.5.13.post1, the last release without upstream's dedup.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
bash .ci/setup-env.sh 2>&1 | grep -v '^WARNING: Location' || true
[ -x .venv/bin/python ] || { echo "setup of .venv failed" >&2; exit 1; }
echo "=== SGLang 0.5.23: all tests"
.venv/bin/python -m pytest tests "$@" || status=1
VENV=.venv-0513 SGLANG_VERSION=0.5.13.post1 bash .ci/setup-env.sh 2>&1 | grep -v '^WARNING: Location' || true
[ -x .venv-0513/bin/python ] || { echo "setup of .venv-0513 failed" >&2; exit 1; }
echo "=== SGLang 0.5.13.post1: release tests"
.venv-0513/bin/python -m pytest -m release tests "$@" || status=1
exit $status
