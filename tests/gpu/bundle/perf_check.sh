#!/usr/bin/env bash
# perf/check_run.py --brief in bash, for a GPU machine without python3
# (tests/gpu/bundle/runner.sh runs it then; copied into the bundle's share/).
#   bash perf_check.sh FABRIX_PERF --brief ARGS...
# The same two runs of fabrix-perf --loopback: every test and mode at 4097 B
# (12 table rows), then write bw and lat at 1 MiB with --mem cuda, else
# 64 KiB (2 rows). Each must exit 0 (fabrix-perf checks every byte itself)
# and print the expected rows and a JSON file; the JSON is not validated
# against perf/schema.py. Exit 77 when the provider has no device here.
set -uo pipefail
perf=$1
shift
brief=false
args=()
for a in "$@"; do if [ "$a" = --brief ]; then brief=true; else args+=("$a"); fi; done
if ! $brief; then
  echo "SKIP: only check_run.py --brief has a bash copy; this check needs python3"
  exit 77
fi
provider='?'
for ((i = 0; i < ${#args[@]} - 1; i++)); do [ "${args[i]}" = --provider ] && provider=${args[i + 1]}; done
big=64K
[[ " ${args[*]} " == *" cuda"* ]] && big=1M
run=0
for extra in "-s 4097 -n 100 --iters-warmup 10" "write -s $big -n 100 --iters-warmup 10"; do
  run=$((run + 1))
  expect=12
  [ "$run" = 2 ] && expect=2
  rm -f r.json
  # shellcheck disable=SC2086 # extra is a word list
  "$perf" --loopback --out_json "$PWD/r.json" --timeout 30 "${args[@]}" $extra >stdout.txt 2>stderr.txt
  rc=$?
  cat stdout.txt
  cat stderr.txt >&2
  if [ "$rc" -ne 0 ]; then
    err=$(cat stderr.txt)
    if [[ "$err" == *"cannot open provider"* || "$err" == *"no CUDA device"* ]]; then
      echo "SKIP: provider $provider has no device here"
      exit 77
    fi
    echo "FAIL: run $run: fabrix-perf exited $rc"
    exit 1
  fi
  rows=0
  while read -r first _; do [[ "$first" =~ ^[0-9]+$ ]] && rows=$((rows + 1)); done <stdout.txt
  if [ "$rows" -ne "$expect" ]; then
    echo "FAIL: run $run: $rows table rows, expected $expect"
    exit 1
  fi
  if [ ! -s r.json ]; then
    echo "FAIL: run $run wrote no JSON"
    exit 1
  fi
done
echo "OK (JSON not checked against the schema: no python3 here)"
