#!/usr/bin/env bash
# Runs inside each of the two linked VMs (vm-pair.sh): one 2-rank job per
# --job, rank 0 on node 1 and rank 1 on node 2, through the launcher path of
# the test harness (FABRIX_TEST_BOOTSTRAP=launcher: each VM runs its rank
# of the job; the built-in TCP store's root listens on node 1's link
# address, a port per job). So every byte a case moves crosses from one
# kernel's rxe0 to the other's. A case that kills a rank (it needs forked
# ranks) or shares a page of memory between ranks (one host only) cannot
# run this way: the callers' --test-case filters leave them out.
#
#   pair-suite.sh --job NAME BINARY 'VAR=VALUE ...' [DOCTEST ARGS...] [--job ...]
#
# A job's environment is one word-split argument; its doctest arguments are
# the words up to the next --job.
# Jobs run in order, each after the previous one ended on this node; every
# job runs even after a failure. A job that exits 0 but received fewer than
# 1000 packets on rxe0 (its hw_counters) fails: its bytes did not cross the
# link. Exit: the first failing job's status.
set -u
[ -n "${FABRIX_VM_NODE:-}" ] || { echo "pair-suite: not in a linked VM (vm-pair.sh)"; exit 2; }

status=0
port=29500
counter=/sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts
received() { cat "$counter" 2>/dev/null || echo 0; }
while (($#)); do
  if [ "$1" != --job ] || (($# < 4)); then
    echo "pair-suite: expected --job NAME BINARY ENV [ARGS...]"
    exit 2
  fi
  name=$2 bin=$3
  read -r -a job_env <<<"$4"
  shift 4
  job_args=()
  while (($#)) && [ "$1" != --job ]; do
    job_args+=("$1")
    shift
  done
  port=$((port + 1))
  echo "=== $name: rank $((FABRIX_VM_NODE - 1)) of 2 on $(hostname) ($FABRIX_VM_IPV4), root 10.77.1.1:$port"
  start=$SECONDS
  before=$(received)
  env "${job_env[@]}" FABRIX_TEST_BOOTSTRAP=launcher FABRIX_RANK=$((FABRIX_VM_NODE - 1)) FABRIX_SIZE=2 \
    FABRIX_BOOTSTRAP=10.77.1.1:$port FABRIX_JOB_TOKEN="vm-pair-$name-$port" "$bin" --no-colors "${job_args[@]}"
  rc=$?
  got=$(($(received) - before))
  if [ "$rc" -eq 0 ] && [ -f "$counter" ] && [ "$got" -lt 1000 ]; then
    echo "=== $name: only $got packets arrived on rxe0: the job did not run across the link"
    rc=1
  fi
  echo "=== $name: exit $rc after $((SECONDS - start)) s, $got packets received on rxe0"
  if [ "$status" -eq 0 ] && [ "$rc" -ne 0 ]; then status=$rc; fi
done
exit "$status"
