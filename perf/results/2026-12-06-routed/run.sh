#!/usr/bin/env bash
# What fabrix::routed costs per operation: fabrix-perf through the routed
# domain (--provider routed, one route) against the same provider run
# directly, same build, same memory (--alloc user: routed registers user
# memory), interleaved rounds. Usage: run.sh BUILD_DIR ROUNDS > results.txt
set -euo pipefail
build=${1:?build dir}
rounds=${2:-5}
export UCX_WARN_UNUSED_ENV_VARS=n
perf=$build/perf/fabrix-perf
one() {  # label, then fabrix-perf arguments; prints "label value"
  local label=$1
  shift
  local out
  out=$(timeout 300 "$perf" --loopback --alloc user "$@" 2>&1)
  # the size's row (summary.py takes lat t_typical, bw BW average)
  awk -v l="$label" '/^ [0-9]+ / {print l ":", $0}' <<<"$out" | tail -1
}
for r in $(seq 1 "$rounds"); do
  for pair in "ucx tcp|node=ucx:tcp" "ofi shm|node=ofi:shm"; do
    p=${pair%%|*}
    route=${pair##*|}
    prov=${p%% *}
    tr=${p##* }
    one "round $r $prov-$tr direct lat8" write lat -s 8 -n 20000 --provider "$prov" --transport "$tr"
    one "round $r $prov-$tr routed lat8" write lat -s 8 -n 20000 --provider routed --transport "$route"
    one "round $r $prov-$tr direct bw64k" write bw -s 65536 -n 20000 --provider "$prov" --transport "$tr"
    one "round $r $prov-$tr routed bw64k" write bw -s 65536 -n 20000 --provider routed --transport "$route"
  done
done
