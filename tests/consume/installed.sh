#!/usr/bin/env bash
# installed: installs this build into a scratch DESTDIR and consumes the
# result the way a user of the installed package would, every consumer with
# -Wall -Wextra -Wpedantic -Werror (and fabrix-info, installed, must run and
# report this version):
#   (a) core consumer built with `pkg-config --cflags --libs fabrix` and no
#       -std flag of its own (the .pc carries -std=c++20), run;
#   (b) each component whose fabrix-<name>.pc was installed (coll, ucx,
#       ofi, verbs, mpi, cuda): its consumer built with
#       `pkg-config --cflags --libs fabrix-<name>` plus the modules of the
#       components it needs too (consumers.sh: coll's consumer is a 2-rank
#       allreduce over UCX, built with `fabrix-coll fabrix-ucx`, and skipped
#       with a message when fabrix-ucx.pc is not installed); run, except
#       verbs (no RDMA device here: a link check);
#   (c) the same consumers built with CMake: find_package(fabrix <version>
#       COMPONENTS <those components>) + fabrix::<name> (coll: fabrix::coll
#       and fabrix::ucx); find_package(fabrix 99) must be refused (version
#       file), and so must an unknown component;
#   (d) the UCX provider built as a plugin out of tree under a name of its
#       own: ucx_renamed_plugin.cpp compiled with `pkg-config fabrix-ucx`
#       alone into libfabrix-ucx-renamed.so,
#       loaded by tests/plugin's conformance_plugin (no provider compiled
#       in), which runs the whole conformance suite through it over UCX tcp
#       under the plugin's own name.
# Every consumer must take its headers and library from the DESTDIR.
#
# Environment (set by tests/consume/meson.build):
#   MESON               the meson command
#   FABRIX_BUILD_ROOT   the build directory to install
#   FABRIX_PREFIX       prefix, libdir, includedir, bindir of that build (absolute)
#   FABRIX_LIBDIR  FABRIX_INCLUDEDIR  FABRIX_BINDIR
#   FABRIX_VERSION      project version
#   FABRIX_CONSUME_SRC  tests/consume (consumer sources)
#   FABRIX_PLUGIN_CONFORMANCE, FABRIX_PLUGIN_SRC  (optional) tests/plugin's
#                       conformance_plugin executable and ucx_renamed_plugin.cpp: (d)
# Arguments: the C++ compiler command.
# Exit 77 (skipped) when meson, pkg-config or cmake is absent.
set -euo pipefail

say() { echo "installed: $*"; }
die() { echo "installed: FAIL: $*" >&2; exit 1; }

(( $# >= 1 )) || die "no compiler command given"
CXX_CMD=("$@")
: "${MESON:?}" "${FABRIX_BUILD_ROOT:?}" "${FABRIX_PREFIX:?}" "${FABRIX_LIBDIR:?}" "${FABRIX_INCLUDEDIR:?}"
: "${FABRIX_VERSION:?}" "${FABRIX_CONSUME_SRC:?}" "${FABRIX_BINDIR:?}"

for tool in pkg-config cmake; do
  if ! command -v "$tool" > /dev/null; then
    say "SKIP: $tool not found"
    exit 77
  fi
done
read -r -a MESON_CMD <<< "$MESON"
if ! "${MESON_CMD[@]}" --version > /dev/null 2>&1; then
  say "SKIP: meson ($MESON) does not run"
  exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fabrix-installed.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
stage="$tmp/root"

say "meson install -C $FABRIX_BUILD_ROOT --destdir $stage"
"${MESON_CMD[@]}" install -C "$FABRIX_BUILD_ROOT" --destdir "$stage" --no-rebuild --quiet

prefix="$stage$FABRIX_PREFIX"
libdir="$stage$FABRIX_LIBDIR"
includedir="$stage$FABRIX_INCLUDEDIR"
pcdir="$libdir/pkgconfig"
cmakedir="$libdir/cmake/fabrix"

for f in "$includedir/fabrix/fabrix.hpp" "$libdir/libfabrix_bootstrap.a" "$pcdir/fabrix.pc" \
         "$cmakedir/fabrixConfig.cmake" "$cmakedir/fabrixConfigVersion.cmake"; do
  [[ -f $f ]] || die "not installed: ${f#"$stage"}"
done
# Each component's consumer: consumer_src, consumer_define, runs_here,
# consumer_needs.
# shellcheck source-path=SCRIPTDIR source=consumers.sh
source "$(dirname "${BASH_SOURCE[0]}")/consumers.sh"

# The components this build installed, each with the header it promises; a
# component whose consumer needs another that is not installed is skipped.
declare -A header=([coll]=collectives.hpp [ucx]=ucx.hpp [ofi]=ofi.hpp [verbs]=verbs.hpp [mpi]=mpi.hpp [cuda]=cuda_ipc.hpp)
components=()
for c in coll ucx ofi verbs mpi cuda; do
  if [[ -f $pcdir/fabrix-$c.pc ]]; then
    [[ -f $includedir/fabrix/${header[$c]} ]] || die "fabrix-$c.pc installed without fabrix/${header[$c]}"
    missing=()
    for n in $(consumer_needs "$c"); do
      [[ -f $pcdir/fabrix-$n.pc ]] || missing+=("fabrix-$n.pc")
    done
    if (( ${#missing[@]} > 0 )); then
      say "SKIP $c: its consumer also needs ${missing[*]}, which this build did not install"
      continue
    fi
    components+=("$c")
  fi
done
say "installed under $FABRIX_PREFIX: headers, libfabrix_bootstrap.a, fabrix.pc, CMake package; components: ${components[*]:-none}"

# fabrix-info is installed and runs from there.
info="$stage$FABRIX_BINDIR/fabrix-info"
[[ -x $info ]] || die "not installed: ${info#"$stage"}"
"$info" --json --section build | grep -q "\"version\": \"$FABRIX_VERSION\"" || die "installed fabrix-info does not report $FABRIX_VERSION"
say "fabrix-info installed: $("$info" --section build | tr '\n' ' ')"

# The .pc files name the real prefix. Point them at the DESTDIR by rewriting
# only their prefix= line in scratch copies: PKG_CONFIG_SYSROOT_DIR would also
# move UCX's own -I/-L into the DESTDIR, and --define-prefix assumes
# <prefix>/lib/pkgconfig, not a multiarch libdir.
mkdir -p "$tmp/pkgconfig"
for f in "$pcdir"/fabrix*.pc; do
  grep -qx "prefix=$FABRIX_PREFIX" "$f" || die "$(basename "$f"): prefix is not $FABRIX_PREFIX: $(grep '^prefix=' "$f")"
  sed "s|^prefix=.*|prefix=$prefix|" "$f" > "$tmp/pkgconfig/$(basename "$f")"
done
pc() {
  PKG_CONFIG_PATH="$tmp/pkgconfig" pkg-config "$@"
}
warn=(-Wall -Wextra -Wpedantic -Werror)

run_consumer() {  # component, binary
  if runs_here "$1"; then
    UCX_WARN_UNUSED_ENV_VARS=n "$2"
  else
    say "  $1: built and linked (not run: needs an RDMA device)"
  fi
}

# (a) pkg-config, core: no -std flag of the consumer's own.
[[ $(pc --modversion fabrix) == "$FABRIX_VERSION" ]] || die "pkg-config fabrix version is $(pc --modversion fabrix), expected $FABRIX_VERSION"
read -r -a flags <<< "$(pc --cflags --libs fabrix)"
say "(a) pkg-config --cflags --libs fabrix: ${flags[*]}"
[[ " ${flags[*]} " == *" -I$includedir "* ]] || die "pkg-config cflags do not point into the DESTDIR"
[[ " ${flags[*]} " == *" -L$libdir "* ]] || die "pkg-config libs do not point into the DESTDIR"
[[ " ${flags[*]} " == *" -std=c++20 "* ]] || die "fabrix.pc does not carry -std=c++20"
"${CXX_CMD[@]}" "${warn[@]}" "$FABRIX_CONSUME_SRC/core_only.cpp" -o "$tmp/pc_core" "${flags[@]}"
"$tmp/pc_core"

# (b) pkg-config, each component, with the modules of the components its
# consumer needs too.
declare -A native=([ucx]=-lucp [ofi]=-lfabric [verbs]=-libverbs [cuda]=-lcudart_static)
for c in "${components[@]}"; do
  [[ " $(pc --cflags "fabrix-$c") " == *" -std=c++20 "* ]] || die "fabrix-$c.pc does not carry -std=c++20 (through fabrix.pc)"
  read -r -a flags <<< "$(pc --libs "fabrix-$c")"
  if [[ -n ${native[$c]:-} && " ${flags[*]} " != *" ${native[$c]} "* ]]; then
    die "fabrix-$c.pc does not bring in ${native[$c]}"
  fi
  modules=("fabrix-$c")
  for n in $(consumer_needs "$c"); do modules+=("fabrix-$n"); done
  read -r -a flags <<< "$(pc --cflags --libs "${modules[@]}")"
  say "(b) pkg-config --cflags --libs ${modules[*]}: ${flags[*]}"
  defs=()
  [[ -z $(consumer_define "$c") ]] || defs=("-D$(consumer_define "$c")")
  "${CXX_CMD[@]}" "${warn[@]}" "${defs[@]}" "$FABRIX_CONSUME_SRC/$(consumer_src "$c")" -o "$tmp/pc_$c" "${flags[@]}"
  run_consumer "$c" "$tmp/pc_$c"
done

# (c) CMake.
cmake_cxx=()
compiler=("${CXX_CMD[@]}")
case "$(basename "${compiler[0]}")" in
  ccache|sccache) cmake_cxx+=("-DCMAKE_CXX_COMPILER_LAUNCHER=${compiler[0]}"); compiler=("${compiler[@]:1}") ;;
esac
cmake_cxx+=("-DCMAKE_CXX_COMPILER=$(command -v "${compiler[0]}" || echo "${compiler[0]}")")
generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi

mkdir -p "$tmp/cmake-src"
cp "$FABRIX_CONSUME_SRC/core_only.cpp" "$tmp/cmake-src/"
for c in "${components[@]}"; do cp "$FABRIX_CONSUME_SRC/$(consumer_src "$c")" "$tmp/cmake-src/"; done
cat > "$tmp/cmake-src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(fabrix_cmake_consumer LANGUAGES CXX)

# The version file must refuse an incompatible request, the package an
# unknown component.
find_package(fabrix 99 QUIET)
if(fabrix_FOUND)
  message(FATAL_ERROR "find_package(fabrix 99) accepted fabrix ${fabrix_VERSION}")
endif()
find_package(fabrix QUIET COMPONENTS no_such_component)
if(fabrix_FOUND)
  message(FATAL_ERROR "find_package(fabrix COMPONENTS no_such_component) succeeded")
endif()

find_package(fabrix ${FABRIX_EXPECTED_VERSION} EXACT REQUIRED COMPONENTS ${FABRIX_COMPONENTS})
message(STATUS "fabrix ${fabrix_VERSION} from ${fabrix_DIR} (components: ${FABRIX_COMPONENTS})")
string(FIND "${fabrix_DIR}" "${FABRIX_STAGE}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "found fabrix at ${fabrix_DIR}, not in ${FABRIX_STAGE}")
endif()
if(NOT TARGET fabrix::fabrix)
  message(FATAL_ERROR "fabrix::fabrix is not defined")
endif()

set(warn -Wall -Wextra -Wpedantic -Werror)
add_executable(app core_only.cpp)
target_link_libraries(app PRIVATE fabrix::fabrix)
target_compile_options(app PRIVATE ${warn})

include(${CMAKE_CURRENT_SOURCE_DIR}/consumers.cmake)  # source_<c>, define_<c>, needs_<c>: consumers.sh's table
foreach(c IN LISTS FABRIX_COMPONENTS)
  if(NOT TARGET fabrix::${c})
    message(FATAL_ERROR "fabrix::${c} is not defined")
  endif()
  add_executable(app_${c} ${source_${c}})
  target_link_libraries(app_${c} PRIVATE fabrix::${c} ${needs_${c}})
  target_compile_options(app_${c} PRIVATE ${warn})
  if(define_${c})
    target_compile_definitions(app_${c} PRIVATE ${define_${c}})
  endif()
endforeach()
CMAKE
for c in "${components[@]}"; do
  echo "set(source_$c $(consumer_src "$c"))"
  echo "set(define_$c $(consumer_define "$c"))"
  echo "set(needs_$c$(for n in $(consumer_needs "$c"); do printf ' fabrix::%s' "$n"; done))"
done > "$tmp/cmake-src/consumers.cmake"

say "(c) cmake with CMAKE_PREFIX_PATH=$prefix, COMPONENTS ${components[*]:-none}"
cmake -S "$tmp/cmake-src" -B "$tmp/cmake-build" "${generator[@]}" "${cmake_cxx[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DFABRIX_EXPECTED_VERSION="$FABRIX_VERSION" \
  -DFABRIX_COMPONENTS="$(IFS=';'; echo "${components[*]}")" \
  -DFABRIX_STAGE="$stage" > "$tmp/cmake-configure.log" 2>&1 || { cat "$tmp/cmake-configure.log" >&2; die "cmake configure"; }
grep -- '-- fabrix ' "$tmp/cmake-configure.log" || true
cmake --build "$tmp/cmake-build" > "$tmp/cmake-build.log" 2>&1 || { cat "$tmp/cmake-build.log" >&2; die "cmake build"; }
"$tmp/cmake-build/app"
for c in "${components[@]}"; do
  run_consumer "$c" "$tmp/cmake-build/app_$c"
done

# (d) A provider plugin built out of tree: the UCX provider exported through
# the C table under a name of its own, "ucx-renamed" (tests/plugin/
# ucx_renamed_plugin.cpp: a provider number no build of fabrix knows, only
# the name's hash), as libfabrix-ucx-renamed.so, compiled against the
# installed package alone, with the consumer's flags (not fabrix's), then
# loaded by the in-tree executable that has no provider compiled in, which
# runs the whole conformance suite through open("ucx-renamed") over UCX tcp.
if [[ -n ${FABRIX_PLUGIN_CONFORMANCE:-} ]] && [[ " ${components[*]} " == *" ucx "* ]]; then
  mkdir -p "$tmp/plugins"
  read -r -a flags <<< "$(pc --cflags --libs fabrix-ucx)"
  say "(d) plugin libfabrix-ucx-renamed.so from ${FABRIX_PLUGIN_SRC:?}: ${flags[*]}"
  "${CXX_CMD[@]}" "${warn[@]}" -shared -fPIC -fvisibility=hidden -Wl,--exclude-libs,ALL \
    "$FABRIX_PLUGIN_SRC" -o "$tmp/plugins/libfabrix-ucx-renamed.so" "${flags[@]}"
  FABRIX_PROVIDER_PATH="$tmp/plugins" FX_PLUGIN_NAME=ucx-renamed FABRIX_TEST_TRANSPORT=tcp UCX_WARN_UNUSED_ENV_VARS=n \
    "$FABRIX_PLUGIN_CONFORMANCE" --no-colors > "$tmp/plugin_conformance.log" 2>&1 ||
    { cat "$tmp/plugin_conformance.log" >&2; die "(d) the conformance suite through the out-of-tree plugin"; }
  grep -E 'test cases:' "$tmp/plugin_conformance.log"
  # Every case ran: none skipped, none left out by a filter.
  grep -Eq 'test cases: +[0-9]+ \| +[0-9]+ passed \| 0 failed \| 0 skipped' "$tmp/plugin_conformance.log" ||
    die "(d) the suite through the out-of-tree plugin skipped cases"
fi

say "ok"
