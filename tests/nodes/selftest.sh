#!/usr/bin/env bash
# netns.sh checks itself: two nodes with their own host names and network
# stacks, two rails that carry bytes (checked at the far end), a tbf limit
# that slows one rail and not the other, and nothing left behind, also when
# the script that made the nodes fails. Exit 77 when namespaces cannot be
# made here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=netns.sh
. "$here/netns.sh"
if ! fxn_init; then
  echo "skipped: $FXN_WHY"
  exit 77
fi
py=$(python3 -c 'import sys; print(sys.executable)')  # once: a pyenv shim takes ~1 s a call
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

fxn_node a
fxn_node b
fxn_link a b 0
fxn_link a b 1
rate_mbit=16
fxn_rate a 1 "${rate_mbit}mbit"

# Host names and network namespaces differ between nodes.
[[ $(fxn_run a hostname) == "$(fxn_ns a)" ]] || fail "node a's host name is $(fxn_run a hostname)"
[[ $(fxn_run b hostname) == "$(fxn_ns b)" ]] || fail "node b's host name is $(fxn_run b hostname)"
[[ $(hostname) != "$(fxn_ns a)" ]] || fail "fxn_run changed this host's name"
[[ $(fxn_run a readlink /proc/self/ns/net) != "$(fxn_run b readlink /proc/self/ns/net)" ]] ||
  fail "nodes a and b share a network namespace"
[[ $(fxn_run a readlink /proc/self/ns/net) != "$(readlink /proc/self/ns/net)" ]] ||
  fail "node a runs in this script's network namespace"
# Only the links made here: loopback and the rails.
devs=$(ip -n "$(fxn_ns a)" -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | tr '\n' ' ')
[[ $devs == "fxr0 fxr1 lo " ]] || fail "node a has interfaces '$devs'"
ip netns exec "$(fxn_ns a)" tc qdisc show dev fxr1 | grep -q '^qdisc tbf' || fail "no tbf on a's rail 1"

# One MiB from a to b over each rail, every byte checked by b.
bytes=$((1 << 20))
transfer() {  # rail -> seconds
  local rail=$1 port=$((20000 + RANDOM % 20000)) server seconds
  fxn_run b "$py" "$here/transfer.py" serve "$(fxn_addr b "$rail")" "$port" &
  server=$!
  seconds=$(fxn_run a "$py" "$here/transfer.py" send "$(fxn_addr b "$rail")" "$port" "$bytes") ||
    fail "transfer over rail $rail"
  wait "$server" || fail "server on rail $rail"
  echo "$seconds"
}
rx0=$(fxn_rx_bytes b 0)
fast=$(transfer 0)
slow=$(transfer 1)
rx0_after=$(fxn_rx_bytes b 0)
echo "1 MiB a -> b: rail 0 ${fast} s, rail 1 (tbf ${rate_mbit}mbit) ${slow} s"
((rx0_after - rx0 >= bytes)) || fail "rail 0 received $((rx0_after - rx0)) bytes, sent $bytes"
# tbf's bound: at most the rate (plus its 32 KiB burst); allow 20% of slack.
"$py" - "$fast" "$slow" "$bytes" "$rate_mbit" <<'PY' || fail "rail timings"
import sys
fast, slow, n, mbit = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
least = 0.8 * (n - 32 * 1024) * 8 / (mbit * 1e6)
ok = True
if slow < least:
    print(f"rail 1 took {slow} s, the limit allows no less than {least:.3f} s", file=sys.stderr); ok = False
if fast * 2 > slow:
    print(f"rail 0 ({fast} s) is not faster than rail 1 ({slow} s)", file=sys.stderr); ok = False
sys.exit(0 if ok else 1)
PY

# Cleanup: a script that fails after making nodes leaves no namespace and
# nothing running in one.
inner=$(bash -c '. "$1"; fxn_init || exit 3; fxn_node x; fxn_node y; fxn_link x y 0
  fxn_run x sleep 600 >/dev/null 2>&1 & sleep 0.3; echo "$FXN_PREFIX" $(ip netns pids "$(fxn_ns x)")
  set -e; false' _ "$here/netns.sh") && fail "the failing script succeeded"
read -r inner_prefix inner_pid <<<"$inner"
[[ -n $inner_prefix && -n $inner_pid ]] || fail "the failing script made no nodes, or nothing ran there: '$inner'"
if ip netns list | grep -q "^$inner_prefix"; then fail "a failed run left $(ip netns list | grep "^$inner_prefix")"; fi
for _ in $(seq 50); do  # SIGKILL takes effect soon, not at once
  state=$(ps -o stat= -p "$inner_pid" || true)
  [[ -z $state || $state == Z* ]] && break
  sleep 0.1
done
[[ -z $state || $state == Z* ]] || fail "process $inner_pid of the failed run still runs ($state)"

# And this run's own nodes go at exit; checked here by removing them now.
mine=$FXN_PREFIX
fxn_cleanup
if ip netns list | grep -q "^$mine"; then fail "fxn_cleanup left $(ip netns list | grep "^$mine")"; fi
echo "netns.sh: nodes, rails, tbf and cleanup work"
