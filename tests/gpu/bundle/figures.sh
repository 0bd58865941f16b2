#!/usr/bin/env bash
# Figures for a GPU run's note (a check of the bundle: run.sh runs it after
# gpu_bench): fabrix-perf over cuda_ipc on device memory — write and read
# latency at 8 B, write bandwidth at 64 KiB, 4 MiB and 64 MiB — appended to
# OUT_FILE as fabrix-perf prints them. Every byte is checked by fabrix-perf
# itself; no figure is judged here.
#   figures.sh FABRIX_PERF OUT_FILE
# Exit 77 (skipped) where fabrix-perf finds no usable CUDA device; needs
# bash and coreutils only.
set -uo pipefail
perf=$1 out=$2
probe=$(timeout 60 "$perf" --loopback --provider cuda_ipc --mem cuda write lat -s 8 -n 10 2>&1)
rc=$?
if [ "$rc" -ne 0 ]; then
  if [[ "$probe" == *"no CUDA device"* ]]; then
    line=${probe%%$'\n'*}
    echo "skipped: no CUDA device usable (${line#fabrix-perf*: })"
    exit 77
  fi
  echo "$probe"
  exit 1
fi
runs=(
  "write lat -s 8 -n 20000"
  "read lat -s 8 -n 20000"
  "write bw -s 65536 -n 20000"
  "write bw -s 4194304 -n 4000"
  "write bw -s 67108864 -n 256"
)
failed=0
for r in "${runs[@]}"; do
  echo "== fabrix-perf --loopback --provider cuda_ipc --mem cuda $r" | tee -a "$out"
  # shellcheck disable=SC2086 # the run's words
  timeout 60 "$perf" --loopback --provider cuda_ipc --mem cuda $r 2>&1 | tee -a "$out" || failed=1
done
exit $failed
