#!/usr/bin/env bash
# The test command: installs what is missing, checks formatting, builds with
# warnings as errors, runs every suite (unit, conformance per provider and
# transport, examples, consume, fuzz), runs the unit, conformance and fuzz
# suites again under ASan+UBSan, the unit, conformance and collectives suites under TSan,
# then the fuzz targets under libFuzzer.
# Ends with one line "N passed, N failed, N skipped".
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh

jobs=$(nproc)
summary() {  # counts from meson's JSON test log
  python3 - "$@" <<'PY'
import json, sys
counts = {"OK": 0, "FAIL": 0, "SKIP": 0, "TIMEOUT": 0, "EXPECTEDFAIL": 0, "UNEXPECTEDPASS": 0, "ERROR": 0}
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        counts[r["result"]] = counts.get(r["result"], 0) + 1
failed = sum(v for k, v in counts.items() if k not in ("OK", "SKIP", "EXPECTEDFAIL"))
print(f"{counts['OK'] + counts['EXPECTEDFAIL']} passed, {failed} failed, {counts['SKIP']} skipped")
PY
}

git ls-files '*.cpp' '*.hpp' | xargs clang-format --dry-run --Werror
echo "clang-format: clean"

rm -rf build-ci build-ci-asan build-ci-tsan
meson setup build-ci -Dwerror=true -Dbuildtype=debugoptimized >/dev/null
ninja -C build-ci -j "$jobs"
status=0
meson test -C build-ci --print-errorlogs --num-processes "$jobs" || status=1

# CUDA is left out of the sanitizer builds (its static runtime is not
# instrumented and GPU tests skip anyway); the CUDA-free cuda/ parts
# (unit_cuda, fuzz_cuda_ipc_wire) still build and run in them.
meson setup build-ci-asan -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled \
  -Dexamples=false >/dev/null
ninja -C build-ci-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-ci-asan --print-errorlogs --num-processes "$jobs" --suite unit --suite conformance --suite fuzz \
  || status=1

# TSan: UCX's own malloc/mmap hooks clash with TSan's interceptors (the
# ranks crash with SIGSEGV), so they are turned off for this run.
meson setup build-ci-tsan -Dwerror=true -Db_sanitize=thread -Db_lundef=false -Dcuda=disabled -Dexamples=false >/dev/null
ninja -C build-ci-tsan -j "$jobs" tests/unit/unit_core tests/unit/unit_bootstrap tests/unit/unit_ucx_parts \
  tests/gpu/unit_cuda tests/conformance/conformance_ucx tests/collectives/collectives_ucx \
  tests/unit/unit_ofi_parts tests/conformance/conformance_ofi
UCX_MEM_EVENTS=no UCX_MEM_MALLOC_HOOKS=no TSAN_OPTIONS=halt_on_error=1 \
  meson test -C build-ci-tsan --no-rebuild --print-errorlogs --num-processes "$jobs" --suite unit --suite conformance \
  --suite collectives || status=1

bash tools/fuzz.sh 20 || status=1

summary build-ci/meson-logs/testlog.json build-ci-asan/meson-logs/testlog.json build-ci-tsan/meson-logs/testlog.json
exit "$status"
