#!/usr/bin/env bash
# fabrix-perf between two simulated nodes (netns.sh), as a user runs it
# between two servers: the server on node a (`fabrix-perf OPTIONS`), the
# client on node b (`fabrix-perf OPTIONS ADDRESS_OF_A`), over one veth link,
# for each network provider given: write bw at 64 KiB and write lat at 8 B.
# Passes when both sides exit 0 (fabrix-perf checks every byte it moved),
# the client's JSON has the result, and the bytes the link carried to node
# a cover what was written. Prints each result line.
#
#   perf.sh FABRIX_PERF PROVIDER:TRANSPORT...     e.g. ucx:tcp 'ofi:tcp;ofi_rxm'
#
# Exit: 0, 1 on a failure, 77 (skipped) where namespaces cannot be made.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
fp=$1
shift
# shellcheck source-path=SCRIPTDIR source=netns.sh
. "$here/netns.sh"
fxn_pair_or_skip
server=$(fxn_addr a 0)
out=$(mktemp -d)
trap 'fxn_cleanup; rm -rf "$out"' EXIT  # fxn_init's cleanup, then ours
# The providers' tcp transports on the link's interface (fxr0 in both).
env_on_link=(env UCX_WARN_UNUSED_ENV_VARS=n UCX_NET_DEVICES=fxr0 FI_TCP_IFACE=fxr0)
port=21000
rc=0
for spec in "$@"; do
  provider=${spec%%:*}
  transport=${spec#*:}
  for run in "write bw -s 65536 -n 2000" "write lat -s 8 -n 2000"; do
    port=$((port + 1))
    read -r -a args <<<"$run"
    args+=(--provider "$provider" --transport "$transport" -p "$port" --timeout 60)
    before=$(fxn_rx_bytes a 0)
    fxn_run a "${env_on_link[@]}" "$fp" "${args[@]}" >"$out/server.log" 2>&1 &
    server_pid=$!
    client_rc=0
    fxn_run b "${env_on_link[@]}" "$fp" "${args[@]}" --out_json "$out/client.json" "$server" >"$out/client.log" 2>&1 ||
      client_rc=$?
    server_rc=0
    wait "$server_pid" || server_rc=$?
    carried=$(($(fxn_rx_bytes a 0) - before))
    result=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
key = "bw_avg_MBps" if r["mode"] == "bw" else "t_typical_us"
print(r["test"], r["mode"], r["bytes"], "B:", key, r[key])' "$out/client.json" 2>/dev/null || echo "no result")
    echo "$provider $transport $run: client $client_rc, server $server_rc, $result, node a received $carried bytes"
    if ((client_rc != 0 || server_rc != 0)) || [[ $result == "no result" ]]; then
      echo "FAIL: $provider $transport $run" >&2
      sed 's/^/  client: /' "$out/client.log" >&2
      sed 's/^/  server: /' "$out/server.log" >&2
      rc=1
    elif [[ $run == *bw* ]] && ((carried < 2000 * 65536)); then
      echo "FAIL: the link carried $carried bytes to node a, fewer than the 2000 x 64 KiB written" >&2
      rc=1
    fi
  done
done
exit "$rc"
