# shellcheck shell=bash
# Sourced (by bash, inside the VM's chroot of the host root) before the
# command runs: brings up loopback and a veth pair with an IPv4 address,
# creates the soft-RoCE device rxe0 on it and waits until its port is
# ACTIVE. Uses the host's iproute2 (`ip`, `rdma`). Exports
#   FABRIX_VM=1  FABRIX_VM_RDMA_DEVICE=rxe0  FABRIX_VM_IPV4=10.77.0.1
#   FABRIX_VM_GID_INDEX=<index of rxe0's RoCE v2 GID for that address>
# Both peers of a test must use rxe0 (loopback QPs): two rxe devices on
# the two ends of one veth pair in one namespace do not reach each other.
# One of two linked VMs (vm-run.sh --node N, FABRIX_VM_NODE=N): rxe0 runs on
# the virtio NIC of the link instead, with 10.77.1.N/24, and
# FABRIX_VM_PEER_IPV4 is the other node's address. With a second link
# (rail 2), rxe1 runs on its NIC with 10.77.2.N/24, and
# FABRIX_VM_RDMA_DEVICES lists every rxe device ("rxe0 rxe1"; else "rxe0").
fx_setup_fail() {
  echo "vm-setup: $*" >&2
  ip -br link >&2 || true
  rdma link >&2 || true
  exit 125
}
export FABRIX_VM=1 FABRIX_VM_RDMA_DEVICE=rxe0 FABRIX_VM_IPV4=10.77.0.1
export PATH=${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}:/usr/sbin:/sbin
unset TMPDIR

ip link set lo up || fx_setup_fail "lo"
# fx_dev: the netdev rxe0 runs on.
# fx_nic R: the netdev of link R's NIC, by its MAC (vm-run.sh: 52:54:00:77:0R:0N).
fx_nic() {
  local d
  for d in /sys/class/net/*; do
    [ "$(cat "$d/address" 2>/dev/null)" = "52:54:00:77:0$1:0$FABRIX_VM_NODE" ] && echo "${d##*/}" && return
  done
}
# fx_port_up DEV: waits until DEV's port 1 is ACTIVE.
fx_port_up() {
  local port=/sys/class/infiniband/$1/ports/1
  for _ in $(seq 100); do
    case $(cat "$port/state" 2>/dev/null) in *ACTIVE*) return ;; esac
    sleep 0.1
  done
  fx_setup_fail "$1 port not ACTIVE"
}
export FABRIX_VM_RDMA_DEVICES=rxe0
if [ -n "${FABRIX_VM_NODE:-}" ]; then
  fx_dev=$(fx_nic 1)
  [ -n "$fx_dev" ] || fx_setup_fail "no NIC for the link"
  fx_dev2=$(fx_nic 2)
  if [ -n "$fx_dev2" ]; then
    ip addr add "10.77.2.$FABRIX_VM_NODE/24" dev "$fx_dev2" || fx_setup_fail "rail 2 address"
    ip link set "$fx_dev2" up || fx_setup_fail "$fx_dev2 up"
    rdma link add rxe1 type rxe netdev "$fx_dev2" || fx_setup_fail "rdma link add rxe1"
    fx_port_up rxe1
    FABRIX_VM_RDMA_DEVICES="rxe0 rxe1"
  fi
  hostname "fabrix-node$FABRIX_VM_NODE" 2>/dev/null || true
  FABRIX_VM_IPV4=10.77.1.$FABRIX_VM_NODE
  export FABRIX_VM_PEER_IPV4=10.77.1.$((3 - FABRIX_VM_NODE))
else
  fx_dev=fxveth0
  ip link add fxveth0 type veth peer name fxveth1 || fx_setup_fail "veth"
  ip link set fxveth1 up || fx_setup_fail "veth up"
fi
ip addr add "$FABRIX_VM_IPV4/24" dev "$fx_dev" || fx_setup_fail "address"
ip link set "$fx_dev" up || fx_setup_fail "$fx_dev up"
rdma link add rxe0 type rxe netdev "$fx_dev" || fx_setup_fail "rdma link add rxe0"

fx_port_up rxe0
fx_port=/sys/class/infiniband/rxe0/ports/1
ls /dev/infiniband/uverbs* >/dev/null 2>&1 || fx_setup_fail "no /dev/infiniband/uverbs*"

# The GID of the IPv4 address, as ::ffff:a.b.c.d, with type RoCE v2.
fx_gid=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${FABRIX_VM_IPV4//./ })
FABRIX_VM_GID_INDEX=""
for _ in $(seq 100); do
  for fx_f in $fx_port/gids/*; do
    fx_i=${fx_f##*/}
    if [ "$(cat "$fx_f" 2>/dev/null)" = "$fx_gid" ] &&
      [ "$(cat $fx_port/gid_attrs/types/"$fx_i" 2>/dev/null)" = "RoCE v2" ]; then
      FABRIX_VM_GID_INDEX=$fx_i
      break 2
    fi
  done
  sleep 0.1
done
[ -n "$FABRIX_VM_GID_INDEX" ] || fx_setup_fail "no RoCE v2 GID for $FABRIX_VM_IPV4 on rxe0"
export FABRIX_VM_GID_INDEX
unset fx_port fx_gid fx_f fx_i fx_dev fx_dev2
unset -f fx_nic fx_port_up
