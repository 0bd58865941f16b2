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
# Build exactly what the GPU suites run (found through meson introspect, so a
# test added to one of them is never left unbuilt), plus the bandwidth bench.
gpu_suites=(gpu cuda cuda_ipc gpu-verbs)
targets_for_suites() {
  meson introspect --tests "$1" | python3 -c '
import json, os, sys
build, suites = os.path.realpath(sys.argv[1]), set(sys.argv[2:])
for t in json.load(sys.stdin):
    exe = os.path.realpath(t["cmd"][0])
    if suites & {s.split(":", 1)[-1] for s in t["suite"]} and exe.startswith(build + "/"):
        print(os.path.relpath(exe, build))' "$1" "${@:2}" | sort -u
}
{
  meson setup "$build" -Dcuda=enabled -Dbuildtype=debugoptimized -Dexamples=false &&
    mapfile -t targets < <(targets_for_suites "$build" "${gpu_suites[@]}") &&
    echo "targets: ${targets[*]}" &&
    # perf/fabrix-perf is run by gpu/perf-cuda_ipc through python3, so introspect does not name it.
    ninja -C "$build" -j "$jobs" "${targets[@]}" tests/gpu/gpu_bench perf/fabrix-perf
} >"$OUT/build.log" 2>&1 || build_rc=$?
note "build rc=$build_rc ($(grep -c warning "$OUT/build.log") warning lines)"

tests_rc=-1
bench_rc=-1
if [ "$build_rc" -eq 0 ]; then
  tests_rc=0
  timeout 400 meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 1 \
    --suite gpu --suite cuda --suite cuda_ipc --suite gpu-verbs >"$OUT/tests.log" 2>&1 || tests_rc=$?
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
