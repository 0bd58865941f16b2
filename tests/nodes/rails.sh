#!/usr/bin/env bash
# Two rails between two simulated nodes (netns.sh): nodes a and b joined by
# two veth links, each rate-limited (tbf) on a's side, and a routed domain
# whose net route names both interfaces, so that fabrix-rails (rails.cpp)
# stripes its 1 MiB writes and reads over them.
#   1. Two rounds of writes and read-backs, every byte checked at both ends;
#      each link must have carried at least a third of what was written
#      (striping, not one rail doing it all).
#   2. The same with rail 1 taken down (ip link set down on a's end) in the
#      middle of round 2: the writes caught on it time out
#      (FABRIX_RAIL_TIMEOUT_MS) and are posted again over rail 0, the route
#      says rail 1 is down, and every byte is still checked at both ends.
#
#   rails.sh FABRIX_RAILS PROVIDER:TRANSPORT    e.g. 'ofi:tcp;ofi_rxm'
#
# Exit: 0, 1 on a failure, 77 (skipped) where namespaces cannot be made.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rails_bin=$1
spec=$2
rate=200mbit
# shellcheck source-path=SCRIPTDIR source=netns.sh
. "$here/netns.sh"
fxn_pair_or_skip
fxn_link a b 1
fxn_rate a 0 "$rate"
fxn_rate a 1 "$rate"
out=$(mktemp -d)
trap 'fxn_cleanup; rm -rf "$out"' EXIT  # fxn_init's cleanup, then ours
export FABRIX_ROUTE="net=$spec@fxr0,fxr1" FABRIX_RAIL_TIMEOUT_MS=2000 UCX_WARN_UNUSED_ENV_VARS=n
echo "FABRIX_ROUTE=$FABRIX_ROUTE, each rail $rate from a to b"

fail() {
  echo "FAIL: $*" >&2
  for log in "$out"/*/*.log; do
    [[ -f $log ]] && sed "s|^|  $(basename "$(dirname "$log")")/$(basename "$log"): |" "$log" >&2
  done
  exit 1
}

# run NAME [--cut]: a server on b, the writer on a, in directory $out/NAME.
run() {
  local name=$1 dir="$out/$1" server writer rc_w=0 rc_s=0
  shift
  mkdir -p "$dir"
  fxn_run b "$rails_bin" serve "$dir" >"$dir/serve.log" 2>&1 &
  server=$!
  fxn_run a "$rails_bin" write "$dir" "$@" >"$dir/write.log" 2>&1 &
  writer=$!
  if [[ ${1:-} == --cut ]]; then
    for _ in $(seq 600); do
      [[ -e $dir/cut-me ]] && break
      kill -0 "$writer" 2>/dev/null || break
      sleep 0.1
    done
    [[ -e $dir/cut-me ]] || fail "$name: the writer never reached the cut"
    ip -n "$(fxn_ns a)" link set fxr1 down
    echo "$name: rail 1 down on node a"
    touch "$dir/cut-done"
  fi
  wait "$writer" || rc_w=$?
  ((rc_w == 0)) || touch "$dir/done"  # let the server stop
  wait "$server" || rc_s=$?
  sed "s/^/$name: /" "$dir/write.log" "$dir/serve.log"
  ((rc_w == 0 && rc_s == 0)) || fail "$name: writer exit $rc_w, server exit $rc_s"
}

rx0=$(fxn_rx_bytes b 0)
rx1=$(fxn_rx_bytes b 1)
run striped
got0=$(($(fxn_rx_bytes b 0) - rx0))
got1=$(($(fxn_rx_bytes b 1) - rx1))
echo "striped: node b received $got0 bytes on rail 0, $got1 on rail 1"
written=$((2 * 32 * 1024 * 1024))
((got0 >= written / 3 && got1 >= written / 3)) ||
  fail "each rail should have carried at least a third of the $written bytes written"

run cut --cut
grep -q "after the cut: .*down: fxr1" "$out/cut/write.log" || fail "the route does not name rail fxr1 as down"
echo "rails: OK"
