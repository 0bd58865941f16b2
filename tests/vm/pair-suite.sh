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
# Jobs run in order; before each, the two nodes meet at a gate (node 1
# listens on the job's port + 100, node 2 connects), so both ranks of a job
# start together even when the job before ended on one node long before the
# other (a failing rank exits at once; its peer may wait out its own
# timeouts), which would otherwise outlast the bootstrap's 30 s connect
# timeout and fail the next job too. Every job runs even after a failure.
# A job that exits 0 but received fewer than 1000 packets on rxe0 (its
# hw_counters) fails: its bytes did not cross the link. With two links
# (vm-pair.sh --rails 2) that holds for rxe1 too: a job there is one over
# both rails. Exit: the first failing job's status.
set -u
[ -n "${FABRIX_VM_NODE:-}" ] || { echo "pair-suite: not in a linked VM (vm-pair.sh)"; exit 2; }

status=0
root=10.77.1.1  # node 1's link address: the bootstrap root and the gates listen there
port=29500
devices=${FABRIX_VM_RDMA_DEVICES:-rxe0}
counter() { echo "/sys/class/infiniband/$1/ports/1/hw_counters/rcvd_pkts"; }  # DEV: its received-packets counter
received() { cat "$(counter "$1")" 2>/dev/null || echo 0; }                      # DEV: packets DEV received so far
gate_limit=300  # s a node waits at a gate for the other
# Returns once the other node reached the same gate (0), or 1 after gate_limit.
gate() {
  local port=$1
  if [ "$FABRIX_VM_NODE" = 1 ]; then
    timeout "$gate_limit" busybox nc -l -p "$port" </dev/null >/dev/null 2>&1
    return
  fi
  local until=$((SECONDS + gate_limit))
  while ((SECONDS < until)); do
    # bash's /dev/tcp: refused until node 1 listens; the connection is all it needs.
    if (exec 3<>"/dev/tcp/$root/$port") 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  return 1
}
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
  if ! gate $((port + 100)); then
    echo "=== $name: the other node did not reach this job within $gate_limit s"
    [ "$status" -ne 0 ] || status=1
    continue
  fi
  echo "=== $name: rank $((FABRIX_VM_NODE - 1)) of 2 on $(hostname) ($FABRIX_VM_IPV4), root $root:$port"
  start=$SECONDS
  declare -A before=()
  for d in $devices; do before[$d]=$(received "$d"); done
  env "${job_env[@]}" FABRIX_TEST_BOOTSTRAP=launcher FABRIX_RANK=$((FABRIX_VM_NODE - 1)) FABRIX_SIZE=2 \
    FABRIX_BOOTSTRAP=$root:$port FABRIX_JOB_TOKEN="vm-pair-$name-$port" "$bin" --no-colors "${job_args[@]}"
  rc=$?
  got=""
  for d in $devices; do
    n=$(($(received "$d") - before[$d]))
    got+="${got:+, }$n on $d"
    if [ "$rc" -eq 0 ] && [ -f "$(counter "$d")" ] && [ "$n" -lt 1000 ]; then
      echo "=== $name: only $n packets arrived on $d: the job did not run across that link"
      rc=1
    fi
  done
  echo "=== $name: exit $rc after $((SECONDS - start)) s, packets received: $got"
  if [ "$status" -eq 0 ] && [ "$rc" -ne 0 ]; then status=$rc; fi
done
exit "$status"
