#!/usr/bin/env bash
# installed: installs this build into a scratch DESTDIR and consumes the
# result the way a user of the installed package would:
#   (a) core consumer built with `pkg-config --cflags --libs fabrix`, run;
#   (b) the same consumer built with CMake: find_package(fabrix <version>)
#       + fabrix::fabrix (and, when fabrixConfig says UCX, a UCX consumer
#       with COMPONENTS ucx + fabrix::ucx), run; find_package(fabrix 99)
#       must be refused (version file);
#   (c) when fabrix-ucx.pc was installed, a UCX consumer built with
#       `pkg-config --cflags --libs fabrix-ucx`, run.
# Every consumer must take its headers and library from the DESTDIR.
#
# Environment (set by tests/consume/meson.build):
#   MESON               the meson command
#   FABRIX_BUILD_ROOT   the build directory to install
#   FABRIX_PREFIX       prefix, libdir, includedir of that build (absolute)
#   FABRIX_LIBDIR  FABRIX_INCLUDEDIR
#   FABRIX_VERSION      project version
#   FABRIX_CONSUME_SRC  tests/consume (consumer sources)
# Arguments: the C++ compiler command.
# Exit 77 (skipped) when meson, pkg-config or cmake is absent.
set -euo pipefail

say() { echo "installed: $*"; }
die() { echo "installed: FAIL: $*" >&2; exit 1; }

(( $# >= 1 )) || die "no compiler command given"
CXX_CMD=("$@")
: "${MESON:?}" "${FABRIX_BUILD_ROOT:?}" "${FABRIX_PREFIX:?}" "${FABRIX_LIBDIR:?}" "${FABRIX_INCLUDEDIR:?}"
: "${FABRIX_VERSION:?}" "${FABRIX_CONSUME_SRC:?}"

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
has_ucx=0
if [[ -f $pcdir/fabrix-ucx.pc ]]; then
  has_ucx=1
  [[ -f $includedir/fabrix/ucx.hpp ]] || die "fabrix-ucx.pc installed without fabrix/ucx.hpp"
fi
say "installed under $FABRIX_PREFIX: headers, libfabrix_bootstrap.a, fabrix.pc$( ((has_ucx)) && echo ', fabrix-ucx.pc'), CMake package"

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

# (a) pkg-config, core.
[[ $(pc --modversion fabrix) == "$FABRIX_VERSION" ]] || die "pkg-config fabrix version is $(pc --modversion fabrix), expected $FABRIX_VERSION"
read -r -a flags <<< "$(pc --cflags --libs fabrix)"
say "(a) pkg-config --cflags --libs fabrix: ${flags[*]}"
[[ " ${flags[*]} " == *" -I$includedir "* ]] || die "pkg-config cflags do not point into the DESTDIR"
[[ " ${flags[*]} " == *" -L$libdir "* ]] || die "pkg-config libs do not point into the DESTDIR"
"${CXX_CMD[@]}" -std=c++20 "${warn[@]}" "$FABRIX_CONSUME_SRC/core_only.cpp" -o "$tmp/pc_core" "${flags[@]}"
"$tmp/pc_core"

# (c) pkg-config, UCX.
if ((has_ucx)); then
  read -r -a flags <<< "$(pc --cflags --libs fabrix-ucx)"
  say "(c) pkg-config --cflags --libs fabrix-ucx: ${flags[*]}"
  [[ " ${flags[*]} " == *" -lucp "* ]] || die "fabrix-ucx.pc does not bring in UCX (-lucp)"
  "${CXX_CMD[@]}" -std=c++20 "${warn[@]}" "$FABRIX_CONSUME_SRC/ucx_loopback.cpp" -o "$tmp/pc_ucx" "${flags[@]}"
  UCX_WARN_UNUSED_ENV_VARS=n "$tmp/pc_ucx"
else
  say "(c) no fabrix-ucx.pc installed (built without UCX): UCX consumer not built"
fi

# (b) CMake.
cmake_cxx=()
compiler=("${CXX_CMD[@]}")
case "$(basename "${compiler[0]}")" in
  ccache|sccache) cmake_cxx+=("-DCMAKE_CXX_COMPILER_LAUNCHER=${compiler[0]}"); compiler=("${compiler[@]:1}") ;;
esac
cmake_cxx+=("-DCMAKE_CXX_COMPILER=$(command -v "${compiler[0]}" || echo "${compiler[0]}")")
generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi

mkdir -p "$tmp/cmake-src"
cp "$FABRIX_CONSUME_SRC/core_only.cpp" "$FABRIX_CONSUME_SRC/ucx_loopback.cpp" "$tmp/cmake-src/"
cat > "$tmp/cmake-src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(fabrix_cmake_consumer LANGUAGES CXX)

# The version file must refuse an incompatible request.
find_package(fabrix 99 QUIET)
if(fabrix_FOUND)
  message(FATAL_ERROR "find_package(fabrix 99) accepted fabrix ${fabrix_VERSION}")
endif()

find_package(fabrix ${FABRIX_EXPECTED_VERSION} EXACT REQUIRED)
message(STATUS "fabrix ${fabrix_VERSION} from ${fabrix_DIR} (UCX: ${fabrix_HAS_UCX})")
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

if(fabrix_HAS_UCX)
  find_package(fabrix REQUIRED COMPONENTS ucx)
  add_executable(app_ucx ucx_loopback.cpp)
  target_link_libraries(app_ucx PRIVATE fabrix::ucx)
  target_compile_options(app_ucx PRIVATE ${warn})
endif()
CMAKE

say "(b) cmake with CMAKE_PREFIX_PATH=$prefix"
cmake -S "$tmp/cmake-src" -B "$tmp/cmake-build" "${generator[@]}" "${cmake_cxx[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DFABRIX_EXPECTED_VERSION="$FABRIX_VERSION" \
  -DFABRIX_STAGE="$stage" > "$tmp/cmake-configure.log" 2>&1 || { cat "$tmp/cmake-configure.log" >&2; die "cmake configure"; }
grep -- '-- fabrix ' "$tmp/cmake-configure.log" || true
cmake --build "$tmp/cmake-build" > "$tmp/cmake-build.log" 2>&1 || { cat "$tmp/cmake-build.log" >&2; die "cmake build"; }
"$tmp/cmake-build/app"
if [[ -x $tmp/cmake-build/app_ucx ]]; then
  UCX_WARN_UNUSED_ENV_VARS=n "$tmp/cmake-build/app_ucx"
elif ((has_ucx)); then
  die "fabrix-ucx.pc is installed but the CMake package has no UCX (fabrix_HAS_UCX)"
fi

say "ok"
