#!/usr/bin/env bash
# static_caps.sh SOURCE_ROOT FILE CXX...: FILE compiles, and with
# -DCALL_FETCH_ADD fails with the provider's static_assert message.
set -euo pipefail
root=$1 file=$2
shift 2
flags=(-std=c++20 -fsyntax-only -I"$root/include")
"$@" "${flags[@]}" "$file"
echo "compiles without the unsupported call: ok"
if out=$("$@" "${flags[@]}" -DCALL_FETCH_ADD "$file" 2>&1); then
  echo "FAIL: fetch_add on a provider without atomics compiled"
  exit 1
fi
if ! grep -q "this provider has no atomics" <<<"$out"; then
  echo "FAIL: the error does not name the missing capability:"
  echo "$out" | head -20
  exit 1
fi
echo "fetch_add on a provider without atomics: compile error naming the capability: ok"
