#!/usr/bin/env bash
# fabrix-perf (its default run, --provider X, --alloc user) against the
# fastest raw loop of each transport (ucx_perftest, perf/raw/raw_ucx,
# perf/raw/raw_ofi), interleaved pairs; writes a markdown table and JSON.
# See perf/compare.py --help and perf/README.md.
#   bash perf/compare.sh [--fabrix-perf build/perf/fabrix-perf] [--sizes 8,65536] [--pairs 5]
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 perf/compare.py "$@"
