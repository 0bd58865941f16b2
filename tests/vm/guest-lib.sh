# shellcheck shell=bash
# Helpers for scripts that run inside the VM (sourced by bash).

step() { printf '\n=== %s\n' "$*"; }
fail() {
  echo "FAILED: $*"
  exit 1
}

# Waits until a server listens: on TCP `port`, or, with port "rdma_cm", an
# rdma_cm ID in LISTEN state (the VM is slow to start a server under TCG,
# and clients of the rdma-core/perftest tools do not retry).
wait_listen() {  # port [seconds]
  local until=$((SECONDS + ${2:-30}))
  while ((SECONDS < until)); do
    if [ "$1" = rdma_cm ]; then
      rdma resource show cm_id 2>/dev/null | grep -q LISTEN && return 0
    else
      ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    fi
    sleep 0.2
  done
  echo "nothing listens on $1 after ${2:-30} s"
  return 1
}

# pair SECONDS TOOL ARGS... -- SERVER_HOST: runs `TOOL ARGS` as a server,
# waits for it to listen (TCP port 18515, or -p PORT; an rdma_cm ID with -R),
# then
# runs `TOOL ARGS SERVER_HOST` as the client; both under a time limit.
# Output goes to the terminal and to /tmp/pair.server, /tmp/pair.client.
# Succeeds when both exit 0.
pair() {
  local limit=$1 tool=$2 port=18515 args=() host
  shift 2
  while [ "$1" != -- ]; do
    [ "$1" != -p ] || port=$2
    [ "$1" != -R ] || port=rdma_cm
    args+=("$1")
    shift
  done
  host=$2
  timeout "$limit" "$tool" "${args[@]}" >/tmp/pair.server 2>&1 &
  local server=$!
  wait_listen "$port" "$limit" || {
    kill "$server" 2>/dev/null
    cat /tmp/pair.server
    return 1
  }
  timeout "$limit" "$tool" "${args[@]}" "$host" >/tmp/pair.client 2>&1
  local client_status=$?
  wait "$server"
  local server_status=$?
  echo "--- server (exit $server_status):"
  cat /tmp/pair.server
  echo "--- client (exit $client_status):"
  cat /tmp/pair.client
  ((server_status == 0 && client_status == 0))
}
