#!/usr/bin/env bash
# core_headers: proves that <fabrix/fabrix.hpp> pulls in no provider header.
#
#   core_headers.sh <source-root> <source.cpp> <c++ compiler command...>
#
# Runs the compiler with -M (preprocess, list every file read) on a file that
# includes only <fabrix/fabrix.hpp>, with only <source-root>/include on the
# include path, and fails if any file read is a provider's native header
# (ucp/, ucs/, uct/, infiniband/, rdma/, anything "cuda", case-insensitive),
# or if fabrix/fabrix.hpp itself is not among them (no vacuous pass).
set -euo pipefail

if (( $# < 3 )); then
  echo "usage: $0 <source-root> <source.cpp> <compiler...>" >&2
  exit 2
fi
srcroot=$1
src=$2
shift 2
incdir="$srcroot/include"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fabrix-core-headers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

forbidden='(^|/)(ucp|ucs|uct|infiniband|rdma)/|cuda'

# Paths inside the source tree are judged relative to it, so that a checkout
# under e.g. /home/me/cuda-work/ is not mistaken for a CUDA header.
relativize() { sed -e "s|^$srcroot/||"; }

# Self-check of the filter, so that a broken pattern cannot make this pass.
for p in /usr/include/ucp/api/ucp.h /usr/include/infiniband/verbs.h /usr/include/rdma/fabric.h \
         /usr/local/cuda/include/cuda_runtime.h /usr/include/uct/api/uct.h /usr/include/ucs/type/status.h \
         /opt/CUDA/include/Cuda.h; do
  if ! printf '%s\n' "$p" | relativize | grep -Eiq "$forbidden"; then
    echo "core_headers: internal error: filter does not catch $p" >&2
    exit 1
  fi
done
if printf '%s\n' "$srcroot/include/fabrix/fabrix.hpp" | relativize | grep -Eiq "$forbidden"; then
  echo "core_headers: internal error: filter rejects fabrix/fabrix.hpp" >&2
  exit 1
fi

echo "core_headers: $* -std=c++20 -M -I$incdir $src"
"$@" -std=c++20 -M -I"$incdir" "$src" > "$tmp/deps.mk"

# Make rule -> one path per line: drop the target, the line continuations and
# empty entries.
sed -e '1s/^[^:]*://' -e 's/\\$//' "$tmp/deps.mk" | tr -s ' \t' '\n' | sed '/^$/d' > "$tmp/files"

total=$(wc -l < "$tmp/files")
core=$(grep -c "^$incdir/fabrix/" "$tmp/files" || true)
echo "core_headers: the core read $total files, $core of them fabrix core headers"

if ! grep -q "^$incdir/fabrix/fabrix\.hpp$" "$tmp/files"; then
  echo "core_headers: FAIL: $incdir/fabrix/fabrix.hpp is not among the files read:" >&2
  cat "$tmp/files" >&2
  exit 1
fi

if relativize < "$tmp/files" | grep -Ei "$forbidden" > "$tmp/bad"; then
  echo "core_headers: FAIL: <fabrix/fabrix.hpp> pulls in provider headers:" >&2
  cat "$tmp/bad" >&2
  exit 1
fi
echo "core_headers: ok: no ucp/ ucs/ uct/ infiniband/ rdma/ or cuda header among them"
