#!/usr/bin/env bash
# fabrix-perf next to the raw tool of the same transport, in one run; prints
# the ratio per size and writes them all as JSON. See perf/compare.py --help.
#   bash perf/compare.sh [--out compare.json] [--sizes 8,4096,65536] [--repeat 3]
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 perf/compare.py "$@"
