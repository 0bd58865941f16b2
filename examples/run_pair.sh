#!/usr/bin/env bash
# Runs a fabrix example as a two-rank job on this machine with the built-in
# bootstrap: run_pair.sh ./hello_write
set -euo pipefail
prog=$1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
       echo $((20000 + RANDOM % 20000)))
export FABRIX_SIZE=2 FABRIX_BOOTSTRAP=127.0.0.1:$port FABRIX_JOB_TOKEN=example-$$
FABRIX_RANK=1 "$prog" & peer=$!
status=0
FABRIX_RANK=0 "$prog" || status=$?
wait "$peer" || status=$?
exit "$status"
