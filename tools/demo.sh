#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the demo on the
# embedded default (loopback on this machine, auto-picked provider, built-in
# bootstrap). Until fabrix-perf lands, the demo is examples/hello_write and
# examples/coro_pingpong as two-rank jobs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
meson setup build-demo -Dbuildtype=release -Dtests=false >/dev/null 2>&1 || meson setup build-demo --reconfigure >/dev/null
ninja -C build-demo -j "$(nproc)"
bash examples/run_pair.sh build-demo/examples/hello_write
bash examples/run_pair.sh build-demo/examples/coro_pingpong
