#!/bin/bash
# Runs inside the VM (tests/vm/vm-run.sh -- bash tests/vm/sanity.sh): rxe0
# is visible to every tool and real RC traffic flows on it, data checked;
# then, when FABRIX_INFO_CHECK is set (meson does), fabrix-info's report,
# and when FABRIX_VERBS_PLUGIN_CHECK is, the verbs provider as a plugin.
# Each check prints what it saw; the first that fails ends the run non-zero.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"
dev=$FABRIX_VM_RDMA_DEVICE gid=$FABRIX_VM_GID_INDEX

step "ibv_devices lists $dev"
ibv_devices | tee /tmp/out && grep -qw "$dev" /tmp/out || fail "$dev not listed"

step "ibv_devinfo: port 1 of $dev is active, link layer Ethernet"
ibv_devinfo -d "$dev" | tee /tmp/out
grep -q 'state:.*PORT_ACTIVE' /tmp/out || fail "port not active"
grep -q 'link_layer:.*Ethernet' /tmp/out || fail "not RoCE"

step "rdma link shows $dev/1 ACTIVE on fxveth0"
rdma link show "$dev/1" | tee /tmp/out
grep -q 'state ACTIVE' /tmp/out && grep -q 'netdev fxveth0' /tmp/out || fail "rdma link"

step "/dev/infiniband/uverbs* and rdma_cm, unlimited memlock"
ls -l /dev/infiniband/ && ls /dev/infiniband/uverbs* /dev/infiniband/rdma_cm >/dev/null &&
  [ "$(ulimit -l)" = unlimited ] || fail "uverbs or rdma_cm device, or memlock"

step "ibv_rc_pingpong: RC send/recv between two processes on $dev, received data checked (--chk)"
pair 60 ibv_rc_pingpong -d "$dev" -g "$gid" -n 200 -s 4096 --chk -- 127.0.0.1 ||
  fail "ibv_rc_pingpong"

step "ib_write_bw: RDMA writes, 64 KiB x 200"
pair 60 ib_write_bw -d "$dev" -x "$gid" -s 65536 -n 200 -F -- 127.0.0.1 || fail "ib_write_bw"
grep -Eq '^ *65536 +200 ' /tmp/pair.client || fail "ib_write_bw printed no result line"

step "ib_read_bw: RDMA reads, 64 KiB x 100"
pair 60 ib_read_bw -d "$dev" -x "$gid" -s 65536 -n 100 -F -- 127.0.0.1 || fail "ib_read_bw"

step "ib_atomic_bw: fetch-and-add, 200 ops"
pair 60 ib_atomic_bw -d "$dev" -x "$gid" -n 200 -F -- 127.0.0.1 || fail "ib_atomic_bw"

step "ib_send_bw -R: RC sends on QPs connected by rdma_cm (as libfabric's verbs provider connects)"
pair 60 ib_send_bw -d "$dev" -R -s 4096 -n 100 -F -- "$FABRIX_VM_IPV4" || fail "ib_send_bw -R"

if [ -n "${FABRIX_INFO_CHECK:-}" ]; then
  step "fabrix-info lists $dev, an active port with a RoCE v2 GID, and the verbs provider would use it"
  $FABRIX_INFO_CHECK --expect-rdma "$dev" || fail "fabrix-info"
fi

if [ -n "${FABRIX_VERBS_PLUGIN_CHECK:-}" ]; then
  step "the verbs provider built as a plugin (libfabrix-verbs.so) opens $dev and writes 4 KiB, bytes checked"
  FX_BUILTIN_PLUGINS=verbs FX_BUILTIN_MUST_OPEN=1 $FABRIX_VERBS_PLUGIN_CHECK || fail "verbs plugin"
fi

echo "sanity: all checks passed"
