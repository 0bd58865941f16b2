#!/usr/bin/env bash
# Striped write bandwidth over two rate-limited rails (issue 19 item 3):
# fabrix-perf between two simulated nodes (tests/nodes/netns.sh) joined by
# two veth links, each limited to RATE by tbf at both ends, server on node
# a, client on node b, as tests/nodes/perf.sh runs it. Per round and size,
# interleaved: the ofi provider run directly on rail 0 (--device fxr0),
# fabrix::routed over rail 0 alone, and fabrix::routed over both rails
# (net=ofi:tcp;ofi_rxm@fxr0,fxr1: writes of FABRIX_STRIPE_MIN and up split
# over the two). fabrix-perf's defaults otherwise (tx depth 128, cq-mod
# 100: most writes unsignaled).
#
#   run.sh BUILD_DIR [ROUNDS] [RATE] > results.txt     (root: namespaces)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?build dir}" && pwd)
rounds=${2:-5}
rate=${3:-400mbit}
# shellcheck source-path=SCRIPTDIR source=../../../tests/nodes/netns.sh
. "$here/../../../tests/nodes/netns.sh"
fxn_pair_or_skip
fxn_link a b 1
for node in a b; do
  for rail in 0 1; do fxn_rate "$node" "$rail" "$rate"; done
done
out=$(mktemp -d)
trap 'fxn_cleanup; rm -rf "$out"' EXIT
perf=$build/perf/fabrix-perf
server=$(fxn_addr a 0)
port=23000
echo "# $(date -u +%FT%TZ) rate $rate per rail, rounds $rounds, $(nproc) cpus"
one() {  # label size iters fabrix-perf-args...; prints "label size MB/s"
  local label=$1 size=$2 iters=$3
  shift 3
  port=$((port + 1))
  local args=(write bw -s "$size" -n "$iters" -p "$port" --timeout 120 "$@")
  fxn_run a "$perf" "${args[@]}" >"$out/server.log" 2>&1 &
  local pid=$!
  if ! fxn_run b "$perf" "${args[@]}" --out_json "$out/client.json" "$server" >"$out/client.log" 2>&1; then
    echo "$label $size failed" >&2
    cat "$out/client.log" "$out/server.log" >&2
    wait "$pid" || true
    return 1
  fi
  wait "$pid"
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print(sys.argv[2], r["bytes"], r["bw_avg_MBps"])' \
    "$out/client.json" "$label"
}
for r in $(seq 1 "$rounds"); do
  for sz in "1048576 200" "4194304 50"; do
    read -r size iters <<<"$sz"
    echo "round $r $(one direct-rail0 "$size" "$iters" --provider ofi --transport 'tcp;ofi_rxm' --device fxr0)"
    echo "round $r $(one routed-rail0 "$size" "$iters" --provider routed --transport 'net=ofi:tcp;ofi_rxm@fxr0')"
    echo "round $r $(one routed-2rails "$size" "$iters" --provider routed --transport 'net=ofi:tcp;ofi_rxm@fxr0,fxr1')"
  done
done
