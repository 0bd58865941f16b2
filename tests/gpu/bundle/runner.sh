#!/usr/bin/env bash
# fabrix GPU checks, prebuilt (made by tests/gpu/bundle.sh; copied into the
# bundle as run.sh). Needs bash, coreutils and the NVIDIA driver, nothing
# else: no compiler, no package, no network beyond loopback; python3 only
# for the fabrix-perf check (without it a bash copy of that check runs).
#
#   OUT=/some/dir bash build-gpu-bundle/run.sh      (from any directory)
#
# Runs every check in checks.sh (the meson suites gpu, cuda, cuda_ipc,
# gpu-verbs and the bandwidth sweep), each under its own `timeout`, the
# whole run within RUN_BUDGET seconds (default 300). Each check is passed,
# failed or skipped: exit 77 is skipped, and so is a doctest run in which
# no test case passed; a timeout is failed.
# Writes under $OUT (default ./gpu-out): summary.json, summary.txt,
# bandwidth.json (when a GPU ran the sweep), figures.txt (fabrix-perf's
# cuda_ipc runs, share/figures.sh, on a GPU), nvidia-smi.txt and
# logs.tar.gz (logs.txt without tar) with one log per check.
# Exit status: 0 when nothing failed, 1 otherwise.
# Knobs: CHECKS='gpu_ipc*' runs only the checks whose names match that
# pattern; RUN_BUDGET=SECONDS; CHECK_TIMEOUT_CAP=SECONDS (default 120, the
# most one check may take); FABRIX_BUNDLE_NO_PYTHON=1 acts as if python3
# were absent.
set -uo pipefail
B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
RUN_BUDGET=${RUN_BUDGET:-300}
CHECK_TIMEOUT_CAP=${CHECK_TIMEOUT_CAP:-120}
CHECKS=${CHECKS:-*}
started=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/fabrix-gpu-run.XXXXXX") || exit 1
logs=$work/logs
mkdir -p "$logs" "$work/cwd"
trap 'rm -rf "$work"' EXIT

note() { echo "[run.sh $((SECONDS - started))s] $*" | tee -a "$logs/run.log"; }
# shellcheck disable=SC1003 # '\\' below is two backslashes, not an escaped quote
json_str() { # $1 as a JSON string
  local s=$1 out="" c i
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    case "$c" in
      '"') out+='\"' ;;
      \\) out+='\\' ;;
      $'\n') out+='\n' ;;
      $'\t') out+='\t' ;;
      $'\r') out+='\r' ;;
      *) if [[ "$c" < ' ' ]]; then out+='?'; else out+=$c; fi ;;
    esac
  done
  printf '"%s"' "$out"
}

minor() { # 2.36 -> 36 (glibc versions are 2.N)
  local v=${1#2.}
  [[ "$v" =~ ^[0-9]+$ ]] && echo "$v" || echo 0
}

declare -A info=()
while IFS='=' read -r k v; do [ -n "$k" ] && info[$k]=$v; done <"$B/bundle.env"
note "bundle ${info[commit]:-?} built ${info[built]:-?} (CUDA ${info[cuda]:-?}), output in $OUT"

# Is the bundle intact?
intact=true
bad_files=()
while read -r sum _size path; do
  [ -n "$path" ] || continue
  if [ ! -f "$B/$path" ]; then
    bad_files+=("$path (missing)")
  elif [ "$(sha256sum <"$B/$path")" != "$sum  -" ]; then
    bad_files+=("$path (sha256 differs)")
  fi
done <"$B/MANIFEST"
if [ "${#bad_files[@]}" -gt 0 ]; then
  intact=false
  note "bundle damaged: ${bad_files[*]}"
fi

# A copy that lost its mode bits (some transfers do) still runs.
shopt -s globstar nullglob
for f in "$B"/bin/**; do
  if [ -f "$f" ] && [ ! -x "$f" ]; then chmod u+x "$f" 2>/dev/null || note "cannot make $f executable"; fi
done
shopt -u globstar nullglob

# The machine.
glibc=""
for ld in /lib64/ld-linux-x86-64.so.2 /lib/ld-linux-x86-64.so.2; do
  [ -x "$ld" ] || continue
  v=$("$ld" --version 2>/dev/null | head -1)
  [[ "$v" =~ ([0-9]+\.[0-9]+)[^0-9]*$ ]] && glibc=${BASH_REMATCH[1]} && break
done
glibc_ok=true
if [ -n "$glibc" ] && [ "$(minor "$glibc")" -lt "$(minor "${info[glibc_min]:-2.0}")" ]; then
  glibc_ok=false
  note "glibc $glibc here, the bundle needs ${info[glibc_min]}: binaries will not start"
fi
gpus=""
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
  nvidia-smi -q 2>&1 | head -300 >>"$OUT/nvidia-smi.txt"
  # Only what nvidia-smi lists when it works (not its error message).
  gpus=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -4 |
    tr '\n' ';') || gpus=""
else
  echo "nvidia-smi: not found on this machine" >"$OUT/nvidia-smi.txt"
fi
devnodes=$(cd /dev 2>/dev/null && echo nvidia[0-9]*)
[ "$devnodes" = 'nvidia[0-9]*' ] && devnodes=""
note "host $(uname -n), $(uname -r), glibc ${glibc:-?}; nvidia-smi: ${gpus:-none}; /dev: ${devnodes:-no nvidia device nodes}"
# The bundle's libraries first, then whatever the machine had (the driver's
# libcuda.so.1 may live on a path only LD_LIBRARY_PATH names). lib/ucx: UCX's
# modules load each other by soname. lib/cxx (libstdc++, libgcc_s) only
# where glibc is new enough for it; else the machine's own C++ runtime.
libpath=$B/lib:$B/lib/ucx
cxx="the bundle's (lib/cxx)"
if [ -d "$B/lib/cxx" ]; then
  if [ -n "$glibc" ] && [ "$(minor "$glibc")" -lt "$(minor "${info[cxx_glibc_min]:-2.0}")" ]; then
    cxx="this machine's (glibc $glibc < ${info[cxx_glibc_min]}, which the bundled one needs; binaries need GLIBCXX_${info[glibcxx_min]:-?})"
  else
    libpath+=:$B/lib/cxx
  fi
fi
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR=$B/lib/ucx
export PYTHONDONTWRITEBYTECODE=1 # check_run.py must not write into the bundle
export FI_PROVIDER_PATH=$B/lib/libfabric # no such folder: Debian's providers are built in; keeps the host's out
# libibverbs opens IBV_DRIVERS entries that are paths as PATH-rdmavNN.so.
mkdir -p "$work/ibv"
ibv=""
for entry in ${info[ibv_drivers]:-}; do
  plugin=${entry%%=*}
  ln -s "$B/${entry#*=}" "$work/ibv/$plugin" && ibv+=${ibv:+:}$work/ibv/${plugin%-rdmav*.so}
done
[ -n "$ibv" ] && export IBV_DRIVERS=$ibv
note "C++ runtime: $cxx"

python=""
if [ "${FABRIX_BUNDLE_NO_PYTHON:-0}" != 1 ] && command -v python3 >/dev/null 2>&1; then python=$(command -v python3); fi

names=() statuses=() reasons=() rcs=() secs=() kinds=() logfiles=()
passed=0 failed=0 skipped=0
record() { # name kind status reason rc seconds log
  names+=("$1") kinds+=("$2") statuses+=("$3") reasons+=("$4") rcs+=("$5") secs+=("$6") logfiles+=("$7")
  case "$3" in passed) passed=$((passed + 1)) ;; failed) failed=$((failed + 1)) ;; *) skipped=$((skipped + 1)) ;; esac
  note "$3: $1 (${6}s)${4:+: $4}"
}

n=0
check() { # NAME KIND TIMEOUT [VAR=VALUE...] -- ARGV...
  local name=$1 kind=$2 limit=$3
  shift 3
  local envs=()
  while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
    envs+=("$1")
    shift
  done
  shift
  local argv=("$@")
  # shellcheck disable=SC2053 # CHECKS is a pattern
  [[ "$name" == $CHECKS ]] || return 0
  n=$((n + 1))
  local log
  log=logs/$(printf '%02d' "$n")-${name//[^A-Za-z0-9_.-]/_}.log
  local left=$((RUN_BUDGET - (SECONDS - started)))
  if [ "$left" -lt 10 ]; then
    record "$name" "$kind" skipped "the run's budget of ${RUN_BUDGET}s is spent" "" 0 ""
    return 0
  fi
  [ "$limit" -gt "$CHECK_TIMEOUT_CAP" ] && limit=$CHECK_TIMEOUT_CAP
  [ "$limit" -gt "$left" ] && limit=$left
  if ! $intact || ! $glibc_ok; then
    local why="the bundle is damaged"
    $glibc_ok || why="glibc ${glibc} here, the bundle needs ${info[glibc_min]}"
    record "$name" "$kind" failed "$why" "" 0 ""
    return 0
  fi
  if [ "${argv[0]}" = python3 ]; then
    if [ -n "$python" ]; then
      argv[0]=$python
    elif [[ "${argv[1]:-}" == */check_run.py ]]; then
      argv=(bash "$B/share/perf_check.sh" "${argv[@]:2}") # check_run.py's brief runs, in bash
    else
      record "$name" "$kind" skipped "python3 is not on this machine" "" 0 ""
      return 0
    fi
  fi
  local cwd=$work/cwd/$n
  mkdir -p "$cwd"
  {
    echo "# check $name ($kind), timeout ${limit}s, cwd a fresh directory"
    echo "# env: LD_LIBRARY_PATH=$LD_LIBRARY_PATH UCX_MODULE_DIR=$UCX_MODULE_DIR ${envs[*]}"
    echo "# command: ${argv[*]}"
  } >"$work/$log"
  local t0=$SECONDS rc
  (cd "$cwd" && exec env "${envs[@]}" timeout -k 10 "$limit" "${argv[@]}") >>"$work/$log" 2>&1
  rc=$?
  local took=$((SECONDS - t0)) status reason=""
  # The end of the log: a skip reason, doctest's count.
  local tailtext line cases="" dpassed="" dskipped=""
  tailtext=$(tail -n 60 "$work/$log")
  while IFS= read -r line; do
    if [[ "$line" =~ skipped:\ (.*)$ ]] || [[ "$line" =~ ^SKIP:\ (.*)$ ]]; then reason=${BASH_REMATCH[1]}; fi
    if [[ "$line" =~ test\ cases:\ *([0-9]+)\ *\|\ *([0-9]+)\ passed\ *\|\ *([0-9]+)\ failed\ *\|\ *([0-9]+)\ skipped ]]; then
      cases=${BASH_REMATCH[1]} dpassed=${BASH_REMATCH[2]} dskipped=${BASH_REMATCH[4]}
    fi
  done <<<"$tailtext"
  case $rc in
    0)
      status=passed
      reason=""
      if [ -n "$cases" ] && [ "$dpassed" -eq 0 ]; then
        status=skipped
        reason="doctest: no test case passed ($cases run, $dskipped skipped)"
      elif [ -n "$cases" ] && [ "$dskipped" -gt 0 ]; then
        reason="doctest: $dskipped of $cases test cases skipped"
      fi
      ;;
    77) status=skipped reason=${reason:-exit 77} ;;
    124 | 137) status=failed reason="timed out after ${limit}s" ;;
    *)
      status=failed
      reason="exit $rc"
      [ "$rc" -gt 128 ] && reason="killed by signal $((rc - 128))"
      ;;
  esac
  record "$name" "$kind" "$status" "$reason" "$rc" "$took" "$log"
}

# shellcheck source=/dev/null
source "$B/checks.sh"

# Results.
seconds=$((SECONDS - started))
no_device=0 # GPU checks that found no usable CUDA device
for i in "${!names[@]}"; do
  if [ "${statuses[i]}" = skipped ] && [[ "${reasons[i]}" == *"no CUDA device"* ]]; then no_device=$((no_device + 1)); fi
done
{
  printf '{\n  "bundle": %s, "cuda": %s, "built": %s,\n' "$(json_str "${info[commit]:-}")" \
    "$(json_str "${info[cuda]:-}")" "$(json_str "${info[built]:-}")"
  printf '  "host": %s, "glibc": %s, "glibc_needed": %s, "nvidia_smi": %s, "dev_nodes": %s,\n' \
    "$(json_str "$(uname -n)")" "$(json_str "$glibc")" "$(json_str "${info[glibc_min]:-}")" "$(json_str "$gpus")" \
    "$(json_str "$devnodes")"
  printf '  "bundle_intact": %s, "python3": %s, "seconds": %d,\n' "$intact" "$(json_str "$python")" "$seconds"
  printf '  "passed": %d, "failed": %d, "skipped": %d, "no_cuda_device": %d,\n' \
    "$passed" "$failed" "$skipped" "$no_device"
  printf '  "checks": ['
  for i in "${!names[@]}"; do
    [ "$i" -gt 0 ] && printf ','
    printf '\n    {"name": %s, "kind": %s, "status": %s, "reason": %s, "rc": %s, "seconds": %d, "log": %s}' \
      "$(json_str "${names[i]}")" "$(json_str "${kinds[i]}")" "$(json_str "${statuses[i]}")" \
      "$(json_str "${reasons[i]}")" "${rcs[i]:-null}" "${secs[i]}" "$(json_str "${logfiles[i]}")"
  done
  printf '\n  ]\n}\n'
} >"$OUT/summary.json"

{
  echo "fabrix GPU checks: $passed passed, $failed failed, $skipped skipped in ${seconds}s" \
    "(bundle ${info[commit]:-?}, host $(uname -n), GPU: ${gpus:-none listed by nvidia-smi})"
  for i in "${!names[@]}"; do
    printf '%-8s %-4s %4ss  %s%s\n' "${statuses[i]}" "${kinds[i]}" "${secs[i]}" "${names[i]}" \
      "${reasons[i]:+  -- ${reasons[i]}}"
  done
  if [ -n "$gpus" ] && [ "$no_device" -gt 0 ]; then
    echo "NOTE: nvidia-smi lists a GPU, yet $no_device checks found no usable CUDA device (driver too old?)"
  fi
  for i in "${!names[@]}"; do
    if [ "${statuses[i]}" != failed ] || [ -z "${logfiles[i]}" ]; then continue; fi
    echo
    echo "---- ${names[i]}: last 40 lines of ${logfiles[i]}"
    tail -n 40 "$work/${logfiles[i]}"
  done
} >"$OUT/summary.txt"

cp "$OUT/summary.txt" "$logs/summary.txt"
if command -v tar >/dev/null 2>&1 && command -v gzip >/dev/null 2>&1; then
  rm -f "$OUT/logs.txt"
  tar -C "$work" -czf "$OUT/logs.tar.gz" logs
else
  rm -f "$OUT/logs.tar.gz"
  for f in "$logs"/*; do
    echo "==== ${f##*/}"
    cat "$f"
  done >"$OUT/logs.txt"
fi
cat "$OUT/summary.txt"
[ "$failed" -eq 0 ]
