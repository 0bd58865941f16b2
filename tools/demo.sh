#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs fabrix-perf on the
# embedded default — loopback on this machine (a server and a client
# process), the auto-picked provider (the best that opens here, run through
# its static type on memory it allocates where it can; the header says which
# and why), the built-in bootstrap — sweeping
# every test (write, read, write_imm, send, fetch_add, compare_swap) as
# bandwidth and latency from 2 B to 8 MiB. Every size's bytes are checked;
# a wrong byte fails the demo. Extra arguments go to fabrix-perf.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
meson setup build-demo -Dbuildtype=release -Dtests=disabled >/dev/null 2>&1 || meson setup build-demo --reconfigure >/dev/null
ninja -C build-demo -j "$(nproc)"
build-demo/perf/fabrix-perf --loopback "$@"
