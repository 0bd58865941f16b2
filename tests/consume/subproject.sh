#!/usr/bin/env bash
# subproject: consumes fabrix as a Meson subproject, the way a project that
# vendors it (or uses a wrap) does. Creates a scratch project whose
# subprojects/fabrix is a symlink to this source tree, gets the core with
#   dependency('fabrix', fallback: ['fabrix', 'fabrix_dep'])
# with fabrix's tests and examples turned off, builds the core consumer and,
# when the subproject provides fabrix-ucx, the UCX consumer; runs both.
# Also checks that none of fabrix's own tests/examples were configured.
#
# Environment (set by tests/consume/meson.build):
#   MESON               the meson command
#   FABRIX_SOURCE_ROOT  this source tree
#   FABRIX_CONSUME_SRC  tests/consume (consumer sources)
# Arguments: the C++ compiler command (exported as CXX).
# Exit 77 (skipped) when meson or ninja is absent.
set -euo pipefail

say() { echo "subproject: $*"; }
die() { echo "subproject: FAIL: $*" >&2; exit 1; }

(( $# >= 1 )) || die "no compiler command given"
: "${MESON:?}" "${FABRIX_SOURCE_ROOT:?}" "${FABRIX_CONSUME_SRC:?}"
read -r -a MESON_CMD <<< "$MESON"
if ! "${MESON_CMD[@]}" --version > /dev/null 2>&1; then
  say "SKIP: meson ($MESON) does not run"
  exit 77
fi
if ! command -v ninja > /dev/null && ! command -v samu > /dev/null; then
  say "SKIP: no ninja"
  exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fabrix-subproject.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
proj="$tmp/consumer"
mkdir -p "$proj/subprojects"
ln -s "$FABRIX_SOURCE_ROOT" "$proj/subprojects/fabrix"
cp "$FABRIX_CONSUME_SRC/core_only.cpp" "$FABRIX_CONSUME_SRC/ucx_loopback.cpp" "$proj/"
cat > "$proj/meson.build" <<'MESON'
project('fabrix_subproject_consumer', 'cpp',
  default_options: ['cpp_std=c++20', 'warning_level=3', 'werror=true', 'buildtype=plain',
                    'fabrix:tests=false', 'fabrix:examples=false', 'fabrix:perf=false'])

fabrix_dep = dependency('fabrix', fallback: ['fabrix', 'fabrix_dep'])
test('core_only', executable('core_only', 'core_only.cpp', dependencies: fabrix_dep))

# fabrix overrides 'fabrix-ucx' only when it found UCX.
fabrix_ucx_dep = dependency('fabrix-ucx', fallback: 'fabrix', required: false)
if fabrix_ucx_dep.found()
  test('ucx_loopback', executable('ucx_loopback', 'ucx_loopback.cpp', dependencies: fabrix_ucx_dep),
    env: ['UCX_WARN_UNUSED_ENV_VARS=n'])
endif
MESON

say "project in $proj, subprojects/fabrix -> $FABRIX_SOURCE_ROOT"
# CXX: build with the same compiler as the enclosing build. Forcing the
# fallback keeps an installed fabrix.pc from being picked instead.
if ! CXX="$*" "${MESON_CMD[@]}" setup "$proj/build" "$proj" --wrap-mode=nodownload \
      --force-fallback-for=fabrix,fabrix-ucx > "$tmp/setup.log" 2>&1; then
  cat "$tmp/setup.log" >&2
  die "meson setup"
fi
grep -E '^(Dependency fabrix|Run-time dependency fabrix|Found pkg-config|  Subproject fabrix)|fabrix(-ucx)? .*found' \
  "$tmp/setup.log" || true

targets=$("${MESON_CMD[@]}" introspect --targets "$proj/build")
if grep -Eq '"name": "(unit_|conformance_)' <<< "$targets"; then
  die "fabrix:tests=false did not turn fabrix's tests off"
fi
grep -q '"name": "fabrix_bootstrap"' <<< "$targets" || die "the subproject did not provide the fabrix_bootstrap library"

if ! "${MESON_CMD[@]}" compile -C "$proj/build" > "$tmp/compile.log" 2>&1; then
  cat "$tmp/compile.log" >&2
  die "build"
fi
say "built: $(grep -o '"name": "[^"]*"' <<< "$targets" | sed 's/"name": //' | tr -d '"' | tr '\n' ' ')"

"$proj/build/core_only"
if [[ -x $proj/build/ucx_loopback ]]; then
  UCX_WARN_UNUSED_ENV_VARS=n "$proj/build/ucx_loopback"
else
  say "the subproject provides no fabrix-ucx (built without UCX): UCX consumer not built"
fi
say "ok"
