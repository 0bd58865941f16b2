#!/usr/bin/env bash
# Installs the Debian 12 packages fabrix needs to build and test, if missing.
# Sourced by test.sh and demo.sh; needs root (or sudo) only when installing.
set -euo pipefail
fabrix_packages=(meson ninja-build g++ pkg-config cmake python3 doctest-dev libucx-dev ucx-utils
                 clang libclang-rt-14-dev clang-format
                 libfabric-dev libfabric-bin                                       # providers/ofi
                 libibverbs-dev librdmacm-dev rdma-core ibverbs-utils              # providers/verbs
                 python3-matplotlib                                                # perf/plot.py
                 qemu-system-x86 busybox-static perftest iproute2                  # tests/vm
                 openmpi-bin libopenmpi-dev libpmix-dev                             # fabrix-mpi, PMIx bootstrap, mpirun tests
                 gdb)                                                               # stacks of hung test ranks
missing=()
for p in "${fabrix_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "fabrix: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -q
  $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
