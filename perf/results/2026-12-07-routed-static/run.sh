#!/usr/bin/env bash
# A static fabrix::routed<Ps...> (each provider domain held by its type)
# against routed<> (the providers behind any_provider, what fabrix-perf's
# routed binding was before) and against the provider named directly, over
# the default routes (UCX shared memory, provider-allocated memory), in
# interleaved rounds. Usage: run.sh ROUTED_ANY_FABRIX_PERF STATIC_FABRIX_PERF
# [ROUNDS=7] (both loopback; ratios: python3 summary.py results.txt).
set -euo pipefail
export UCX_WARN_UNUSED_ENV_VARS=n
# label, binary, provider: one line per side, run in this order each round.
sides=("ucx $2 ucx" "routed-any $1 routed" "routed-static $2 routed")
for r in $(seq 1 "${3:-7}"); do
  for test in "lat8:write lat -s 8 -n 20000" "bw8l32:write bw -s 8 -l 32 -n 200000"; do
    for side in "${sides[@]}"; do
      read -r label bin provider <<<"$side"
      # shellcheck disable=SC2086 # the test's words are separate arguments
      timeout 300 "$bin" --loopback ${test#*:} --provider "$provider" 2>&1 |
        awk -v l="round $r $label ${test%%:*}" '/^ [0-9]+ / {print l ":", $0}' | tail -1
    done
  done
done
