#!/usr/bin/env bash
# The device copies the working tree with the carried paths, 64 MiB in all: since 12-06 the tracked results
# (benchmarks/results, ~6 MB and growing by ~0.3 MB a run pair) and .whl (58.4 MB) no longer fit together, and no
# device runner reads them. Move them out of the tree for the device calls and back before merging or committing:
#   bash tools/gpu-engine/results-aside.sh out    # before the first device call
#   bash tools/gpu-engine/results-aside.sh back   # after the last (then bench_live.py --merge ...)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
aside=${RESULTS_ASIDE:-/tmp/smd-results-aside}
case "${1:-}" in
  out)
    [ -e "$aside" ] && { echo "results-aside: $aside exists (an earlier 'out' not brought back?): nothing moved" >&2; exit 1; }
    [ -d "$root/benchmarks/results" ] || { echo "results-aside: no benchmarks/results to move" >&2; exit 1; }
    mv "$root/benchmarks/results" "$aside"
    echo "results-aside: benchmarks/results moved to $aside ($(du -sh "$aside" | cut -f1)); bring it back with: $0 back" ;;
  back)
    [ -d "$aside" ] || { echo "results-aside: nothing at $aside to bring back" >&2; exit 1; }
    [ -e "$root/benchmarks/results" ] && { echo "results-aside: benchmarks/results exists: not overwritten (compare with $aside by hand)" >&2; exit 1; }
    mv "$aside" "$root/benchmarks/results"
    echo "results-aside: benchmarks/results back in the tree" ;;
  *) echo "usage: $0 out|back" >&2; exit 2 ;;
esac
