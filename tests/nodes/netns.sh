# shellcheck shell=bash disable=SC2034  # FXN_* are read by the scripts that source this
# Simulated nodes for tests: each "node" is a network namespace (ip netns)
# whose processes also get a UTS namespace with the node's own host name, so
# that they see their own network stack and host name on one kernel. Source
# this file from bash; it changes nothing until fxn_init.
#
#   fxn_init || exit 77          # may we make namespaces? sets the cleanup trap
#   fxn_pair_or_skip             # fxn_init (or exit 77), nodes a and b, rail 0
#   fxn_node a; fxn_node b       # two nodes, loopback up
#   fxn_link a b 0               # rail 0: a veth pair, 10.77.0.1 (a) -- 10.77.0.2 (b)
#   fxn_link a b 1               # rail 1: a second pair, 10.77.1.1 -- 10.77.1.2
#   fxn_rate a 1 100mbit         # tbf on a's end of rail 1 (egress)
#   fxn_run a prog args...       # runs prog on node a (its netns, host name)
#   fxn_ns a; fxn_addr a 0       # its namespace name; its address on rail 0
#
# Names carry a per-run prefix (fxn-<pid>-<random>-), addresses (10.77.R.x/24)
# exist only inside the namespaces made here, and the EXIT trap removes
# every namespace this run made (with its links and whatever still runs in
# it), on success and on failure alike. The interface of rail R is fxrR in
# each node. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2.

FXN_PREFIX=""
FXN_NODES=()          # node names, in order of creation (index + 1 = host part of addresses)
declare -A FXN_INDEX  # node name -> its number (1, 2, ...)

# Why fxn_init failed, for the caller's skip message.
FXN_WHY=""

fxn_ns() { echo "${FXN_PREFIX}$1"; }

fxn_cleanup() {
  local rc=$?
  local i ns pids
  for ((i = ${#FXN_NODES[@]} - 1; i >= 0; i--)); do
    ns=$(fxn_ns "${FXN_NODES[i]}")
    # Whatever this run left running in its own namespace.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [[ -n $pids ]]; then
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || echo "netns.sh: could not remove namespace $ns" >&2
  done
  FXN_NODES=()
  return "$rc"
}

# Prepares a run: a fresh prefix, the cleanup trap, and a probe that
# namespaces can be made here. Returns 1 (reason in FXN_WHY) when not.
fxn_init() {
  FXN_PREFIX="fxn-$$-$RANDOM-"
  if ! command -v ip >/dev/null; then
    FXN_WHY="ip (iproute2) is not installed"
    return 1
  fi
  if ! command -v unshare >/dev/null; then
    FXN_WHY="unshare (util-linux) is not installed"
    return 1
  fi
  trap fxn_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local probe="${FXN_PREFIX}probe" err
  if ! err=$(ip netns add "$probe" 2>&1); then
    FXN_WHY="cannot create a network namespace (root with CAP_SYS_ADMIN needed): $err"
    return 1
  fi
  if ! err=$(ip netns exec "$probe" unshare --uts true 2>&1); then
    ip netns del "$probe" 2>/dev/null || true
    FXN_WHY="cannot enter a namespace with a UTS namespace of its own: $err"
    return 1
  fi
  ip netns del "$probe"
  return 0
}

# The usual start of a two-node script: fxn_init, nodes a and b, rail 0
# between them; exits 77 (skipped, saying why) where namespaces cannot be
# made here.
fxn_pair_or_skip() {
  if ! fxn_init; then
    echo "skipped: $FXN_WHY"
    exit 77
  fi
  fxn_node a
  fxn_node b
  fxn_link a b 0
}

# Creates node NAME (a network namespace with loopback up).
fxn_node() {
  local name=$1 ns
  ns=$(fxn_ns "$name")
  ip netns add "$ns"
  FXN_NODES+=("$name")
  FXN_INDEX[$name]=${#FXN_NODES[@]}
  ip -n "$ns" link set lo up
}

# Node NAME's address on rail RAIL.
fxn_addr() { echo "10.77.$2.${FXN_INDEX[$1]}"; }

# Joins nodes A and B on rail RAIL (0-255) with a veth pair: interface fxrRAIL
# in each, addresses fxn_addr. One pair per rail and node pair (a rail's /24
# is one link), so rails of more than two nodes are not made here.
fxn_link() {
  local a=$1 b=$2 rail=$3 dev="fxr$3" na nb
  na=$(fxn_ns "$a")
  nb=$(fxn_ns "$b")
  ip link add "$dev" netns "$na" type veth peer name "$dev" netns "$nb"
  ip -n "$na" addr add "$(fxn_addr "$a" "$rail")/24" dev "$dev"
  ip -n "$nb" addr add "$(fxn_addr "$b" "$rail")/24" dev "$dev"
  ip -n "$na" link set "$dev" up
  ip -n "$nb" link set "$dev" up
  # The carrier comes a moment after both ends are up; until then UCX lists
  # no device there.
  local i
  for ((i = 0; i < 100; i++)); do
    if ip -n "$na" link show "$dev" | grep -q 'state UP' && ip -n "$nb" link show "$dev" | grep -q 'state UP'; then
      return 0
    fi
    sleep 0.05
  done
  echo "netns.sh: link $dev between $a and $b did not come up" >&2
  return 1
}

# Limits what node NAME sends on rail RAIL to RATE (tc's units: 100mbit, 1gbit).
fxn_rate() {
  local ns dev="fxr$2" rate=$3
  ns=$(fxn_ns "$1")
  ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" burst 32kb latency 50ms
}

# Bytes node NAME received on rail RAIL so far.
fxn_rx_bytes() { ip netns exec "$(fxn_ns "$1")" cat "/sys/class/net/fxr$2/statistics/rx_bytes"; }

# Runs a command on node NAME: its network namespace, a UTS namespace of its
# own with the namespace's name as host name.
fxn_run() {
  local ns
  ns=$(fxn_ns "$1")
  shift
  # shellcheck disable=SC2016  # expanded by that sh
  ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
}
