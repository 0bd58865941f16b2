#!/usr/bin/env bash
# The routed domain's cost per operation over its default routes (UCX
# shared memory, provider-allocated memory), before and after a change to
# the routed path, against the provider through any_provider (what
# open("auto") gives where there is one provider domain), in interleaved
# rounds. Usage: run.sh BEFORE_FABRIX_PERF AFTER_FABRIX_PERF [ROUNDS=7]
# (both loopback; ratios: python3 summary.py results.txt).
set -euo pipefail
old=$1
new=$2
export UCX_WARN_UNUSED_ENV_VARS=n
one() {
  local label=$1 bin=$2
  shift 2
  timeout 300 "$bin" --loopback "$@" 2>&1 | awk -v l="$label" '/^ [0-9]+ / {print l ":", $0}' | tail -1
}
for r in $(seq 1 "${3:-7}"); do
  one "round $r any lat8" "$new" write lat -s 8 -n 20000 --provider ucx --dispatch any
  one "round $r routed-before lat8" "$old" write lat -s 8 -n 20000 --provider routed
  one "round $r routed-after lat8" "$new" write lat -s 8 -n 20000 --provider routed
  one "round $r any bw8l32" "$new" write bw -s 8 -l 32 -n 200000 --provider ucx --dispatch any
  one "round $r routed-before bw8l32" "$old" write bw -s 8 -l 32 -n 200000 --provider routed
  one "round $r routed-after bw8l32" "$new" write bw -s 8 -l 32 -n 200000 --provider routed
done
