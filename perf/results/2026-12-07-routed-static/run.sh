#!/usr/bin/env bash
# A static fabrix::routed<Ps...> (each provider domain held by its type)
# against routed<> (the providers behind any_provider, what fabrix-perf's
# routed binding was before) and against the provider named directly, over
# the default routes (UCX shared memory, provider-allocated memory), in
# interleaved rounds. Usage: run.sh ROUTED_ANY_FABRIX_PERF STATIC_FABRIX_PERF
# [ROUNDS=7] (both loopback; ratios: python3 summary.py results.txt).
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
  one "round $r ucx lat8" "$new" write lat -s 8 -n 20000 --provider ucx
  one "round $r routed-any lat8" "$old" write lat -s 8 -n 20000 --provider routed
  one "round $r routed-static lat8" "$new" write lat -s 8 -n 20000 --provider routed
  one "round $r ucx bw8l32" "$new" write bw -s 8 -l 32 -n 200000 --provider ucx
  one "round $r routed-any bw8l32" "$old" write bw -s 8 -l 32 -n 200000 --provider routed
  one "round $r routed-static bw8l32" "$new" write bw -s 8 -l 32 -n 200000 --provider routed
done
