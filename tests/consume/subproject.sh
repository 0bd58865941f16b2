#!/usr/bin/env bash
# subproject: consumes fabrix as a Meson subproject, the way a project that
# vendors it (or uses a wrap) does. Creates a scratch project whose
# subprojects/fabrix is a symlink to this source tree and whose
# subprojects/fabrix.wrap names what fabrix provides (packaging/README.md),
# then asks with plain dependency() calls, no fallback: keyword:
#   dependency('fabrix'), dependency('fabrix-coll'), -ucx, -ofi, -verbs, -mpi
# and builds each consumer with warning_level=3 and werror, together with
# the components it needs too (consumers.sh: coll's consumer, a 2-rank
# allreduce over UCX, with [dependency('fabrix-coll'),
# dependency('fabrix-ucx')], built when both are found; fabrix-coll needs
# nothing, so it must be there whenever fabrix-ucx is); runs them (verbs:
# a link check, no RDMA device here). Passes no fabrix option: checks that
# in a subproject fabrix's tests, examples, perf tools, fabrix-info and CUDA
# kernels are off by default (no nvcc run when the parent did not ask);
# then a second parent asks for CUDA and builds and runs fabrix-cuda's
# consumer (nvcc runs there: about half a minute on two cores).
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
# shellcheck source-path=SCRIPTDIR source=consumers.sh
source "$(dirname "${BASH_SOURCE[0]}")/consumers.sh"
asked=(coll ucx ofi verbs mpi)  # fabrix-cuda is not: a subproject leaves CUDA out unless asked
cp "$FABRIX_CONSUME_SRC/core_only.cpp" "$proj/"
for c in "${asked[@]}"; do cp "$FABRIX_CONSUME_SRC/$(consumer_src "$c")" "$proj/"; done
cat > "$proj/subprojects/fabrix.wrap" <<'WRAP'
[wrap-file]
directory = fabrix

[provide]
dependency_names = fabrix, fabrix-coll, fabrix-ucx, fabrix-ofi, fabrix-verbs, fabrix-mpi, fabrix-cuda
WRAP
cat > "$proj/meson.build" <<'MESON'
project('fabrix_subproject_consumer', 'cpp',
  default_options: ['cpp_std=c++20', 'warning_level=3', 'werror=true', 'buildtype=plain'])

test('core_only', executable('core_only', 'core_only.cpp', dependencies: dependency('fabrix')))

MESON
# consumers.sh's table, as a Meson dictionary:
# name -> [source, cpp_args, runs, the other components it needs].
{
  echo "# A provider is there when fabrix found its library."
  echo "consumers = {"
  for c in "${asked[@]}"; do
    args=""
    [[ -z $(consumer_define "$c") ]] || args="'-D$(consumer_define "$c")'"
    runs=false
    if runs_here "$c"; then runs=true; fi
    needs=""
    for n in $(consumer_needs "$c"); do needs+="${needs:+, }'$n'"; done
    echo "  '$c': ['$(consumer_src "$c")', [$args], $runs, [$needs]],"
  done
  echo "}"
} >> "$proj/meson.build"
cat >> "$proj/meson.build" <<'MESON'
foreach name, how : consumers
  deps = [dependency('fabrix-' + name, required: false)]
  foreach other : how[3]
    deps += dependency('fabrix-' + other, required: false)
  endforeach
  found = true
  foreach dep : deps
    found = found and dep.found()
  endforeach
  if found
    exe = executable(name + '_consumer', how[0], cpp_args: how[1], dependencies: deps)
    if how[2]
      test(name, exe, env: ['UCX_WARN_UNUSED_ENV_VARS=n'])
    endif
  endif
endforeach
if dependency('fabrix-cuda', required: false).found()
  error('fabrix-cuda was configured in a subproject whose parent did not ask for it')
endif
MESON

say "project in $proj, subprojects/fabrix -> $FABRIX_SOURCE_ROOT"
# CXX: build with the same compiler as the enclosing build. Forcing the
# fallback keeps an installed fabrix.pc from being picked instead.
if ! CXX="$*" "${MESON_CMD[@]}" setup "$proj/build" "$proj" --wrap-mode=nodownload \
      --force-fallback-for=fabrix,fabrix-coll,fabrix-ucx,fabrix-ofi,fabrix-verbs,fabrix-mpi,fabrix-cuda > "$tmp/setup.log" 2>&1; then
  cat "$tmp/setup.log" >&2
  die "meson setup"
fi
grep -E '^Dependency fabrix' "$tmp/setup.log" || true

targets=$("${MESON_CMD[@]}" introspect --targets "$proj/build")
if grep -Eq '"name": "(unit_|conformance_|hello_write"|fabrix-perf"|fabrix-info")' <<< "$targets"; then
  die "fabrix's tests, examples or tools were configured in a subproject that did not ask for them"
fi
if grep -q '"name": "fabrix_cuda_kernels"' <<< "$targets"; then
  die "fabrix's CUDA kernels were configured in a subproject that did not ask for them"
fi
grep -q '"name": "fabrix_bootstrap"' <<< "$targets" || die "the subproject did not provide the fabrix_bootstrap library"
if grep -q '"name": "ucx_consumer"' <<< "$targets" && ! grep -q '"name": "coll_consumer"' <<< "$targets"; then
  die "the subproject provided fabrix-ucx but not fabrix-coll (which needs nothing but the core)"
fi

if ! "${MESON_CMD[@]}" compile -C "$proj/build" > "$tmp/compile.log" 2>&1; then
  cat "$tmp/compile.log" >&2
  die "build"
fi
say "built: $(grep -o '"name": "[^"]*"' <<< "$targets" | sed 's/"name": //' | tr -d '"' | tr '\n' ' ')"

"${MESON_CMD[@]}" test -C "$proj/build" --no-rebuild --print-errorlogs > "$tmp/test.log" 2>&1 || { cat "$tmp/test.log" >&2; die "a consumer failed"; }
grep -E '^ *[0-9]+/[0-9]+ ' "$tmp/test.log" || true

# A parent that asks for CUDA (-Dfabrix:cuda=enabled) gets fabrix-cuda from
# a plain dependency(): the kernels are built with nvcc and cuda_probe.cpp
# links and runs (it answers "no device" on a machine without a GPU). Only
# the consumer and what it needs are built (nvcc's part is most of it).
# Without nvcc, `enabled` must fail the parent's setup with a reason.
cuda_proj="$tmp/cuda_consumer"
mkdir -p "$cuda_proj/subprojects"
ln -s "$FABRIX_SOURCE_ROOT" "$cuda_proj/subprojects/fabrix"
cp "$proj/subprojects/fabrix.wrap" "$cuda_proj/subprojects/"
cp "$FABRIX_CONSUME_SRC/$(consumer_src cuda)" "$cuda_proj/"
cat > "$cuda_proj/meson.build" <<MESON
project('fabrix_cuda_subproject_consumer', 'cpp',
  default_options: ['cpp_std=c++20', 'warning_level=3', 'werror=true', 'buildtype=plain'])
test('cuda', executable('cuda_consumer', '$(consumer_src cuda)', dependencies: dependency('fabrix-cuda')))
MESON
nvcc_here=false
if command -v nvcc > /dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then nvcc_here=true; fi
if CXX="$*" "${MESON_CMD[@]}" setup "$cuda_proj/build" "$cuda_proj" --wrap-mode=nodownload -Dfabrix:cuda=enabled \
      --force-fallback-for=fabrix,fabrix-cuda > "$tmp/cuda_setup.log" 2>&1; then
  $nvcc_here || die "fabrix:cuda=enabled configured without nvcc"
  targets=$("${MESON_CMD[@]}" introspect --targets "$cuda_proj/build")
  grep -q '"name": "fabrix_cuda_kernels"' <<< "$targets" || die "a parent asked for CUDA and got no kernels"
  if ! "${MESON_CMD[@]}" compile -C "$cuda_proj/build" cuda_consumer > "$tmp/cuda_compile.log" 2>&1; then
    cat "$tmp/cuda_compile.log" >&2
    die "build with fabrix:cuda=enabled"
  fi
  for o in atomics.o collective_kernels.o; do
    [[ -n $(find "$cuda_proj/build/subprojects" -name "$o" -size +0) ]] || die "nvcc did not build $o for the asking parent"
  done
  "$cuda_proj/build/cuda_consumer" || die "the CUDA consumer failed"
  say "cuda asked: built and ran"
else
  if $nvcc_here; then
    cat "$tmp/cuda_setup.log" >&2
    die "meson setup with fabrix:cuda=enabled"
  fi
  grep -qi 'nvcc' "$tmp/cuda_setup.log" || { cat "$tmp/cuda_setup.log" >&2; die "cuda=enabled without nvcc failed for another reason"; }
  say "cuda asked: no nvcc here, and setup said so"
fi
say "ok"
