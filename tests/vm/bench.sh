#!/bin/bash
# Runs inside the VM (tests/vm/vm-run.sh -- bash tests/vm/bench.sh): the raw
# perftest baselines on rxe0, server and client on the same device
# (loopback QPs), one line per measurement. Not a test: numbers to compare
# fabrix-perf against, in the same VM.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"
dev=$FABRIX_VM_RDMA_DEVICE gid=$FABRIX_VM_GID_INDEX
iters=${BENCH_ITERS:-300}

bw() {  # tool size
  pair 120 "$1" -d "$dev" -x "$gid" -s "$2" -n "$iters" -F -- 127.0.0.1 >/dev/null || fail "$1 -s $2"
  awk -v t="$1" -v s="$2" '$1 == s && NF >= 5 { printf "%-12s %8s B  avg %8.2f MB/s  peak %8.2f MB/s\n", t, s, $4, $3 }' \
    /tmp/pair.client
}
lat() {  # tool size
  pair 120 "$1" -d "$dev" -x "$gid" -s "$2" -n "$iters" -F -- 127.0.0.1 >/dev/null || fail "$1 -s $2"
  awk -v t="$1" -v s="$2" '$1 == s && NF >= 7 {
    printf "%-12s %8s B  typical %8.2f us  avg %8.2f us  min %8.2f us  p99 %8.2f us\n", t, s, $5, $6, $3, $8 }' \
    /tmp/pair.client
}

echo "perftest on $dev (soft-RoCE, loopback QPs, $(nproc) vCPUs, TCG), $iters iterations each"
lat ib_write_lat 8
lat ib_read_lat 8
for s in 8 512 4096 65536 1048576; do bw ib_write_bw "$s"; done
bw ib_read_bw 65536

# UCX over rc_verbs on the same device (see README.md for why ud_verbs and GID 0).
ucx() {  # test size
  UCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=$dev:1 UCX_IB_GID_INDEX=0 \
    pair 120 ucx_perftest -t "$1" -s "$2" -n "$iters" -p 13337 -- 127.0.0.1 >/dev/null || fail "ucx_perftest $1"
  awk -v t="$1" -v s="$2" '$1 == "Final:" {
    if (t ~ /lat/) printf "%-12s %8s B  typical %8.2f us  avg %8.2f us (ucx_perftest, rc_verbs)\n", t, s, $3, $4
    else printf "%-12s %8s B  avg %8.2f MB/s (ucx_perftest, rc_verbs)\n", t, s, $6 }' /tmp/pair.client
}
ucx ucp_put_lat 8
ucx ucp_put_bw 65536
