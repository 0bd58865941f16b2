#!/usr/bin/env bash
# Runs every fuzz target under libFuzzer (clang, ASan+UBSan) for SECONDS each
# (default 20): tools/fuzz.sh [SECONDS]. The same targets run in meson's
# `fuzz` suite through a standalone driver; this adds coverage guidance.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
out=build-fuzz
mkdir -p "$out"
cxx=${CLANGXX:-clang++}
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -Iinclude -Iproviders/ucx/include -Iproviders/verbs/include -Icuda/include)
declare -A extra=([remote_buffer]="" [bootstrap_wire]="src/bootstrap/wire.cpp src/bootstrap/hmac.cpp" [ucx_address]="-lucp -luct -lucs"
                  [verbs_address]="-libverbs -lrdmacm" [cuda_ipc_wire]="")
for target in remote_buffer bootstrap_wire ucx_address verbs_address cuda_ipc_wire; do
  # shellcheck disable=SC2086
  "$cxx" "${flags[@]}" "tests/fuzz/fuzz_$target.cpp" ${extra[$target]} -o "$out/fuzz_$target"
  mkdir -p "$out/corpus_$target"
  echo "fuzz_$target: ${seconds}s under libFuzzer"
  "$out/fuzz_$target" -max_total_time="$seconds" -print_final_stats=0 "$out/corpus_$target" 2>&1 | tail -n 2
done
