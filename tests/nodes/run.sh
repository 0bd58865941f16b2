#!/usr/bin/env bash
# Runs a program built on the conformance harness (tests/conformance/
# harness.hpp) with its ranks on two simulated nodes, a and b (netns.sh),
# joined by one veth link: rank r runs on node r % 2, and the bootstrap root
# listens on node a. The program itself starts here; the harness moves each
# rank onto its node.
#
#   run.sh [--min-link-bytes N] -- PROGRAM [ARGS...]
#
# --min-link-bytes: fails unless at least N bytes crossed the link in each
# direction (so the ranks did talk over it). Exit: the program's, or 77
# (skipped) when namespaces cannot be made here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
min_bytes=0
while [[ $# -gt 0 && $1 != -- ]]; do
  case $1 in
    --min-link-bytes)
      min_bytes=$2
      shift 2
      ;;
    *)
      echo "run.sh: unknown option $1" >&2
      exit 2
      ;;
  esac
done
[[ ${1:-} == -- ]] && shift
[[ $# -gt 0 ]] || {
  echo "usage: run.sh [--min-link-bytes N] -- PROGRAM [ARGS...]" >&2
  exit 2
}

# shellcheck source-path=SCRIPTDIR source=netns.sh
. "$here/netns.sh"
fxn_pair_or_skip
FABRIX_TEST_NODES="$(fxn_ns a),$(fxn_ns b)"
FABRIX_TEST_NODE_ADDRS="$(fxn_addr a 0),$(fxn_addr b 0)"
export FABRIX_TEST_NODES FABRIX_TEST_NODE_ADDRS
unset FABRIX_NODE_ID  # the nodes are told apart by host name and namespace
echo "nodes: $FABRIX_TEST_NODES at $FABRIX_TEST_NODE_ADDRS"

rx_a=$(fxn_rx_bytes a 0)
rx_b=$(fxn_rx_bytes b 0)
rc=0
"$@" || rc=$?
got_a=$(($(fxn_rx_bytes a 0) - rx_a))
got_b=$(($(fxn_rx_bytes b 0) - rx_b))
echo "link a-b: node a received $got_a bytes, node b $got_b"
if ((rc == 0 && (got_a < min_bytes || got_b < min_bytes))); then
  echo "FAIL: fewer than $min_bytes bytes crossed the link one way: the ranks did not talk over it" >&2
  rc=1
fi
exit "$rc"
