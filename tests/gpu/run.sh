#!/usr/bin/env bash
# The one prepared script for a machine with a GPU (e.g. a lent H200):
#   bash tests/gpu/run.sh            (repo root as cwd; results under $OUT)
# Installs what is missing (tools/deps.sh), builds the CUDA parts with
# -Dcuda=enabled, runs the GPU tests, the cuda_ipc conformance entry and the
# no-GPU cuda unit tests, then the bandwidth sweep (4 KiB - 1 GiB, fabrix
# cuda_ipc writes between two processes vs. same-process cudaMemcpy D2D).
# Writes under $OUT: summary.json, bandwidth.json, build.log, tests.log,
# testlog.json, bench.log, nvidia-smi.txt. Meant to finish in under 5 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/build-gpu-out}
mkdir -p "$OUT"
start=$(date +%s)
export PATH="$PATH:/usr/local/cuda/bin"

note() { echo "[run.sh $(($(date +%s) - start))s] $*" | tee -a "$OUT/run.log"; }

(nvidia-smi -q 2>&1 | head -200) >"$OUT/nvidia-smi.txt" || true
note "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"

deps_rc=0
timeout 120 bash tools/deps.sh >"$OUT/deps.log" 2>&1 || deps_rc=$?
note "tools/deps.sh rc=$deps_rc (a machine without package access keeps what it has)"

build=build-gpu
jobs=$(nproc)
build_rc=0
rm -rf "$build"
{
  meson setup "$build" -Dcuda=enabled -Dbuildtype=debugoptimized -Dexamples=false &&
    ninja -C "$build" -j "$jobs" tests/gpu/gpu_ipc tests/gpu/gpu_bench tests/gpu/unit_cuda \
      tests/conformance/conformance_cuda_ipc tests/collectives/gpu_collectives
} >"$OUT/build.log" 2>&1 || build_rc=$?
# fabrix-perf for the gpu suite's gpu/perf-cuda_ipc (--mem cuda over cuda_ipc, a few seconds).
[ "$build_rc" -eq 0 ] && { ninja -C "$build" -j "$jobs" perf/fabrix-perf >>"$OUT/build.log" 2>&1 || build_rc=$?; }
note "build rc=$build_rc ($(grep -c warning "$OUT/build.log") warning lines)"

tests_rc=-1
bench_rc=-1
if [ "$build_rc" -eq 0 ]; then
  tests_rc=0
  timeout 400 meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 1 \
    --suite gpu --suite cuda --suite cuda_ipc >"$OUT/tests.log" 2>&1 || tests_rc=$?
  cp "$build/meson-logs/testlog.json" "$OUT/testlog.json" 2>/dev/null || true
  cp "$build/meson-logs/testlog.txt" "$OUT/testlog.txt" 2>/dev/null || true
  note "tests rc=$tests_rc: $(grep -E '^(Ok|Fail|Skipped|Timeout):' "$OUT/tests.log" | tr -s ' \n' ' ')"

  bench_rc=0
  timeout 120 "$build/tests/gpu/gpu_bench" "$OUT/bandwidth.json" >"$OUT/bench.log" 2>&1 || bench_rc=$?
  note "bench rc=$bench_rc"
  cat "$OUT/bench.log" | tee -a "$OUT/run.log"
fi

cat >"$OUT/summary.json" <<JSON
{"deps_rc": $deps_rc, "build_rc": $build_rc, "tests_rc": $tests_rc, "bench_rc": $bench_rc,
 "seconds": $(($(date +%s) - start))}
JSON
note "done: $(cat "$OUT/summary.json" | tr -d '\n')"
[ "$build_rc" -eq 0 ] && [ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
