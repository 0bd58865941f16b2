#!/usr/bin/env bash
# Runs a program built on the conformance harness (tests/conformance/
# harness.hpp) with its ranks on two simulated nodes, a and b (netns.sh),
# joined by one veth link: rank r runs on node r % 2, and the bootstrap root
# listens on node a. The program itself starts here; the harness moves each
# rank onto its node.
#
#   run.sh [--min-link-bytes N] [--rails 2] -- PROGRAM [ARGS...]
#
# --min-link-bytes: fails unless at least N bytes crossed the link in each
# direction (so the ranks did talk over it); with --rails 2, a second link
# (rail 1, interface fxr1 on each node) and N bytes over each. Exit: the
# program's, or 77 (skipped) when namespaces cannot be made here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
min_bytes=0
rails=1
while [[ $# -gt 0 && $1 != -- ]]; do
  case $1 in
    --min-link-bytes)
      min_bytes=$2
      shift 2
      ;;
    --rails)
      rails=$2
      [[ $rails == 1 || $rails == 2 ]] || {
        echo "run.sh: --rails is 1 or 2" >&2
        exit 2
      }
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

((rails == 2)) && fxn_link a b 1
rx_a=()
rx_b=()
for ((r = 0; r < rails; r++)); do
  rx_a[r]=$(fxn_rx_bytes a "$r")
  rx_b[r]=$(fxn_rx_bytes b "$r")
done
rc=0
"$@" || rc=$?
for ((r = 0; r < rails; r++)); do
  got_a=$(($(fxn_rx_bytes a "$r") - rx_a[r]))
  got_b=$(($(fxn_rx_bytes b "$r") - rx_b[r]))
  echo "link a-b, rail $r: node a received $got_a bytes, node b $got_b"
  if ((rc == 0 && (got_a < min_bytes || got_b < min_bytes))); then
    echo "FAIL: fewer than $min_bytes bytes crossed rail $r one way: the ranks did not talk over it" >&2
    rc=1
  fi
done
exit "$rc"
