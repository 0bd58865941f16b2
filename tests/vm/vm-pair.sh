#!/usr/bin/env bash
# Two simulated nodes that are real kernels: boots two VMs (vm-run.sh, one
# vCPU each) joined by a virtual Ethernet link, each with its own soft-RoCE
# device rxe0 on that link, so RoCE traffic crosses from one kernel to the
# other. Both run the same command; inside, FABRIX_VM_NODE (1 or 2),
# FABRIX_VM_IPV4 (10.77.1.N) and FABRIX_VM_PEER_IPV4 say which node it is.
# Prints each node's output, then exits with node 1's status, or node 2's
# when node 1 succeeded.
#
#   tests/vm/vm-pair.sh [--timeout S] [--mem MiB] [--rails 2] -- COMMAND [ARGS...]
#
# --timeout is each guest command's limit (vm-run.sh --timeout); --mem each
# VM's memory (default 1536); --rails 2 joins them by a second link too,
# with rxe1 on it in each (10.77.2.N; two rails). Both VMs run with
# --strict. A link is qemu's `-netdev stream` over a unix socket in a fresh
# directory: node 1 listens, node 2 starts once the sockets exist. Exit 77
# (skipped) as vm-run.sh: only where qemu or the kernel cannot be had.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
timeout_s=600
mem=1536
rails=1
while (($#)); do
  case $1 in
    --timeout) timeout_s=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --rails) rails=$2; shift 2 ;;
    --) shift; break ;;
    *) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
  esac
done
(($#)) || { echo "vm-pair: no command" >&2; exit 2; }
case $rails in 1 | 2) ;; *) echo "vm-pair: --rails is 1 or 2" >&2; exit 2 ;; esac

dir=$(mktemp -d /tmp/fabrix-pair.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

node() {  # N listen|connect: one VM, its output in $dir/N.out, its status in $dir/N.status
  local rc=0 links=() r
  for r in $(seq "$rails"); do links+=(--link "$2:$dir/link$r"); done
  "$here/vm-run.sh" --node "$1" "${links[@]}" --smp 1 --mem "$mem" --timeout "$timeout_s" --strict -- "${cmd[@]}" \
    >"$dir/$1.out" 2>&1 || rc=$?
  echo "$rc" >"$dir/$1.status"
}
cmd=("$@")
node 1 listen &
pids+=($!)
# Node 2 connects to the sockets node 1's qemu makes; node 1 may first build
# the kernel cache (under vm-run.sh's lock) or end early (skip, failure).
until [ -S "$dir/link$rails" ] || [ -f "$dir/1.status" ]; do sleep 0.2; done
if [ -S "$dir/link$rails" ]; then
  node 2 connect &
  pids+=($!)
fi
wait
pids=()

status=0
for n in 1 2; do
  echo "==== node $n"
  cat "$dir/$n.out" 2>/dev/null || echo "(no output)"
  rc=$(cat "$dir/$n.status" 2>/dev/null || echo 125)
  echo "==== node $n: exit $rc"
  if [ "$status" -eq 0 ] && [ "$rc" -ne 0 ]; then status=$rc; fi
done
exit "$status"
