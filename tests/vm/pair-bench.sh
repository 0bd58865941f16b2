#!/usr/bin/env bash
# fabrix-perf against perftest between the two linked VMs (vm-pair.sh):
# servers on node 1, clients on node 2, over each node's rxe0, alternating
# per round so that both see the same conditions. Not a test: numbers for
# the notes (TCG makes them slow; compare ratios in one run only).
#
#   tests/vm/vm-pair.sh --timeout 900 -- bash tests/vm/pair-bench.sh FABRIX_PERF [ROUNDS=3]
#
# Per round: ib_write_bw and fabrix-perf write bw at 64 KiB, ib_write_lat
# and fabrix-perf write lat at 8 B (1000 iterations each; fabrix-perf over
# verbs, moderating completions as perftest does), the order of each pair
# alternating per round. Node 2 prints one line per measurement:
#   ROUND TOOL TEST SIZE VALUE UNIT
set -uo pipefail
[ -n "${FABRIX_VM_NODE:-}" ] || { echo "pair-bench: not in a linked VM (vm-pair.sh)"; exit 2; }
fp=$1
rounds=${2:-3}
dev=$FABRIX_VM_RDMA_DEVICE gid=$FABRIX_VM_GID_INDEX server=10.77.1.1
port=20000

# Node 1 serves; node 2 connects, again and again until the server is up.
run() {  # log TOOL ARGS... : one measurement, with a fresh port
  local log=$1 tool=$2
  shift 2
  port=$((port + 1))
  if [ "$FABRIX_VM_NODE" = 1 ]; then
    timeout 300 "$tool" "$@" -p "$port" >/tmp/server.log 2>&1 || { echo "server $tool failed:"; cat /tmp/server.log; }
    return 0
  fi
  for _ in $(seq 120); do
    timeout 300 "$tool" "$@" -p "$port" "$server" >"$log" 2>&1 && return 0
    sleep 0.5
  done
  echo "client $tool $* failed:"
  cat "$log"
  return 1
}

# One measurement by each tool; prints its line on node 2.
perftest_bw() {
  run /tmp/c.log ib_write_bw -d "$dev" -x "$gid" -s 65536 -n 1000 -F || status=1
  [ "$FABRIX_VM_NODE" = 1 ] || awk -v r="$r" '$1 == 65536 && NF >= 5 { print r, "ib_write_bw write bw 65536", $4, "MB/s" }' /tmp/c.log
}
fabrix_bw() {
  run /tmp/c.log "$fp" --provider verbs --device "$dev" write bw -s 65536 -n 1000 || status=1
  [ "$FABRIX_VM_NODE" = 1 ] || awk -v r="$r" '$1 == 65536 && NF >= 4 { print r, "fabrix-perf write bw 65536", $4, "MB/s" }' /tmp/c.log
}
perftest_lat() {
  run /tmp/c.log ib_write_lat -d "$dev" -x "$gid" -s 8 -n 1000 -F || status=1
  [ "$FABRIX_VM_NODE" = 1 ] || awk -v r="$r" '$1 == 8 && NF >= 7 { print r, "ib_write_lat write lat 8", $5, "us" }' /tmp/c.log
}
fabrix_lat() {
  run /tmp/c.log "$fp" --provider verbs --device "$dev" write lat -s 8 -n 1000 || status=1
  [ "$FABRIX_VM_NODE" = 1 ] || awk -v r="$r" '$1 == 8 && NF >= 5 { print r, "fabrix-perf write lat 8", $5, "us" }' /tmp/c.log
}

# Odd rounds run perftest first, even rounds fabrix-perf first, so that
# neither always follows the other.
status=0
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then
    perftest_bw; fabrix_bw; perftest_lat; fabrix_lat
  else
    fabrix_bw; perftest_bw; fabrix_lat; perftest_lat
  fi
done
exit "$status"
