#!/usr/bin/env bash
# The A/B of README.md: ib_write_bw and two fabrix-perf builds, build/fp-old
# (e353f35) and build/fp-nap (e353f35 with the napping control channel),
# 64 KiB write bw, the order rotating per round. Run as pair-bench.sh is:
#   tests/vm/vm-pair.sh --timeout 900 -- bash perf/results/2026-12-07-vm-pair/run-ab.sh 30
set -uo pipefail
rounds=$1
dev=$FABRIX_VM_RDMA_DEVICE gid=$FABRIX_VM_GID_INDEX server=10.77.1.1
port=20000
run() {
  local log=$1 tool=$2
  shift 2
  port=$((port + 1))
  if [ "$FABRIX_VM_NODE" = 1 ]; then
    timeout 120 "$tool" "$@" -p "$port" >/tmp/server.log 2>&1 || { echo "server $tool failed:"; cat /tmp/server.log; }
    return 0
  fi
  for _ in $(seq 120); do
    timeout 120 "$tool" "$@" -p "$port" "$server" >"$log" 2>&1 && return 0
    grep -q "sent nothing\|failed\|error" "$log" && break
    sleep 0.5
  done
  echo "client $tool $* failed:"; cat "$log"; return 1
}
for r in $(seq "$rounds"); do
  for k in 0 1 2; do
    t=$(( (k + r) % 3 ))
    case $t in
      0) run /tmp/c.log ib_write_bw -d "$dev" -x "$gid" -s 65536 -n 1000 -F
         [ "$FABRIX_VM_NODE" = 1 ] || awk -v r="$r" '$1 == 65536 && NF >= 5 { print r, "ib_write_bw write bw 65536", $4, "MB/s" }' /tmp/c.log ;;
      1) run /tmp/c.log build/fp-old --provider verbs --device "$dev" --timeout 30 write bw -s 65536 -n 1000
         [ "$FABRIX_VM_NODE" = 1 ] || awk -v r="$r" '$1 == 65536 && NF >= 4 { print r, "old write bw 65536", $4, "MB/s" }' /tmp/c.log ;;
      2) run /tmp/c.log build/fp-nap --provider verbs --device "$dev" --timeout 30 write bw -s 65536 -n 1000
         [ "$FABRIX_VM_NODE" = 1 ] || awk -v r="$r" '$1 == 65536 && NF >= 4 { print r, "nap write bw 65536", $4, "MB/s" }' /tmp/c.log ;;
    esac
  done
done
