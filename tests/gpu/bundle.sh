#!/usr/bin/env bash
# Packs the GPU checks into one folder that runs on a bare GPU machine (no
# compiler, no Debian packages, no package registry: bash, coreutils and the
# NVIDIA driver). Runs here, on a machine with nvcc; nothing compiles there.
#
#   bash tests/gpu/bundle.sh [--no-build] [BUILD_DIR [OUT_DIR]]
#
# BUILD_DIR: a configured meson build dir with CUDA (e.g. CI's build-ci);
#   ninja builds the targets the checks need that are missing or stale
#   there (normally none), nothing else. --no-build: build nothing, fail if
#   one is missing (the rehearsal test runs inside `meson test`).
#   Without BUILD_DIR: configures build-gpu-src (-Dcuda=enabled) and builds
#   only those targets.
# OUT_DIR: default build-gpu-bundle (git-ignored); replaced if it exists.
#
# The bundle: bin/ (every executable behind the meson suites gpu, cuda,
# cuda_ipc and gpu-verbs, plus gpu_bench and fabrix-perf, debug info
# stripped), lib/ (every shared library they load that is not glibc or the
# GPU driver: UCX with its modules in lib/ucx, libfabric, libibverbs with
# its provider plugins in lib/libibverbs, libstdc++, libgcc_s, ...),
# share/ (scripts the checks run, e.g. perf/check_run.py), checks.sh (each
# test's command, env and timeout from `meson introspect --tests`), run.sh
# (the runner: tests/gpu/bundle/runner.sh; share/perf_check.sh is its
# bash copy of perf/check_run.py --brief, for a machine without python3) and MANIFEST (sha256, size and
# path of every file). The CUDA runtime is linked statically (cudart_static,
# cuda/meson.build); libcuda.so.1 comes from the GPU machine's driver.
# On the GPU machine:  OUT=/some/dir bash build-gpu-bundle/run.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
max_mib=64

build_mode=build
if [ "${1:-}" = --no-build ]; then
  build_mode=none
  shift
fi
build=${1:-}
out=${2:-$root/build-gpu-bundle}
say() { echo "bundle.sh: $*"; }
die() {
  echo "bundle.sh: error: $*" >&2
  exit 1
}

if [ -z "$build" ]; then
  build=$root/build-gpu-src
  if [ ! -f "$build/meson-info/intro-tests.json" ]; then
    say "configuring $build"
    log=$(mktemp "${TMPDIR:-/tmp}/fabrix-bundle-setup.XXXXXX")
    meson setup "$build" "$root" -Dcuda=enabled -Dbuildtype=debugoptimized -Dexamples=disabled >"$log" 2>&1 || {
      tail -30 "$log" >&2
      die "meson setup failed (log: $log)"
    }
    rm -f "$log"
  fi
fi
[ -f "$build/meson-info/intro-tests.json" ] || die "$build is not a configured meson build dir"
build=$(cd "$build" && pwd)
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
case "$out" in "$root" | "$build" | / | "$HOME") die "refusing to use $out as the bundle folder" ;; esac

# A meson.build changed since the last build: reconfigure first, so the plan
# reads today's tests (their commands and environment), not the last ones.
if [ "$build_mode" = build ]; then
  nice ninja -C "$build" build.ninja | { grep -v '^ninja: no work to do' || true; }
fi

plan=$(mktemp -d "${TMPDIR:-/tmp}/fabrix-bundle-plan.XXXXXX")
trap 'rm -rf "$plan"' EXIT
python3 "$here/bundle/plan.py" "$build" "$root" "$plan" || die "no plan for $build (see above)"
mapfile -t targets <"$plan/targets.txt"

if [ "$build_mode" = build ]; then
  # Up-to-date targets cost ninja nothing; only missing or stale ones build.
  say "ninja: ${#targets[@]} targets (built only where missing or stale)"
  nice ninja -C "$build" "${targets[@]}" | { grep -v '^ninja: no work to do' || true; }
fi
for t in "${targets[@]}"; do
  [ -x "$build/$t" ] || die "$build/$t is not built (run: ninja -C $build $t)"
done

# Replace a previous bundle, never a folder that is something else.
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ] && [ ! -f "$out/MANIFEST" ]; then
  die "$out exists and is not a bundle (no MANIFEST): choose another OUT_DIR"
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/ucx" "$out/lib/libibverbs" "$out/share"

# Executables, without debug info (symbols stay, for backtraces).
for t in "${targets[@]}"; do
  mkdir -p "$out/bin/$(dirname "$t")"
  objcopy --strip-debug "$build/$t" "$out/bin/$t"
done
while read -r s; do
  [ -n "$s" ] || continue
  mkdir -p "$out/share/$(dirname "$s")"
  cp "$root/$s" "$out/share/$s"
done <"$plan/scripts.txt"

# What the libraries dlopen (ldd does not see it): UCX's transport modules
# (lib/ucx, UCX_MODULE_DIR; they also need each other by soname, so the
# runner puts lib/ucx on LD_LIBRARY_PATH too) and libibverbs' provider
# plugins. A plugin that is a link to a library with a soname
# (libmlx5-rdmav34.so -> ../libmlx5.so.1.x, which UCX and libfabric also
# load by soname) is carried once, as lib/<soname>, so a process never maps
# two copies; the others go to lib/libibverbs. bundle.env's ibv_drivers maps
# each plugin's file name to its file, and the runner links them into a
# temporary folder named by IBV_DRIVERS.
multiarch=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
ucx_dir=$multiarch/ucx
elves=()
ibv_map=()
ldd_bins=$(find "$out/bin" -type f -perm -u+x -exec ldd {} + 2>/dev/null)
if [[ "$ldd_bins" == *libucs.so* ]]; then
  for m in "$ucx_dir"/lib*.so.0; do
    [ -e "$m" ] || continue
    cp -L "$m" "$out/lib/ucx/"
    elves+=("$out/lib/ucx/$(basename "$m")")
  done
fi
for p in "$multiarch"/libibverbs/lib*-rdmav*.so; do
  [ -e "$p" ] || continue
  real=$(readlink -f "$p")
  if [ "$(dirname "$real")" != "$(dirname "$p")" ]; then
    soname=$(objdump -p "$real" | awk '$1 == "SONAME" { print $2 }')
    [ -n "$soname" ] || die "$real has no soname"
    dest=lib/$soname
  else
    dest=lib/libibverbs/$(basename "$p")
  fi
  cp -L "$real" "$out/$dest"
  elves+=("$out/$dest")
  ibv_map+=("$(basename "$p")=$dest")
done
rmdir "$out/lib/ucx" "$out/lib/libibverbs" 2>/dev/null || true

# Every shared library any of them needs, except glibc and the GPU driver,
# copied under its soname as a plain file (ldd lists the whole closure).
# The C++ runtime goes to lib/cxx: the runner uses it only where glibc is
# new enough for it, else the machine's own (binaries need less than it).
system_lib='^(linux-vdso\.so|ld-linux[^ ]*\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libcuda\.so|libnvidia-)'
missing=()
while read -r name arrow path _; do
  [ -n "$name" ] || continue
  [[ "$name" =~ $system_lib ]] && continue
  [[ "$name" = /* ]] && continue # the interpreter line of ldd
  if [ "$arrow" != "=>" ] || [ "$path" = not ]; then
    missing+=("$name")
    continue
  fi
  [[ "$(readlink -f "$path")" == "$ucx_dir"/* ]] && continue # a UCX module, in lib/ucx already
  case "$name" in
    libstdc++.so.* | libgcc_s.so.*) dest=$out/lib/cxx/$name ;;
    *) dest=$out/lib/$name ;;
  esac
  mkdir -p "$(dirname "$dest")"
  [ -e "$dest" ] || cp -L "$path" "$dest"
done < <(echo "$ldd_bins" | grep -v ':$' | sed 's/^[[:space:]]*//' |
  cat - <(for f in "${elves[@]}"; do ldd "$f" | sed 's/^[[:space:]]*//'; done) |
  sort -u)
[ "${#missing[@]}" -eq 0 ] || die "libraries not found here: ${missing[*]}"

# The checks and the runner.
cp "$plan/checks.sh" "$out/checks.sh"
cp "$here/bundle/runner.sh" "$out/run.sh"
cp "$here/bundle/perf_check.sh" "$out/share/perf_check.sh"
cp "$here/bundle/figures.sh" "$out/share/figures.sh"
chmod +x "$out/run.sh"
newest() { # the newest symbol version ($1: GLIBC or GLIBCXX) the ELF files $2... need
  local tag=$1
  shift
  objdump -T "$@" 2>/dev/null | grep -o "${tag}_[0-9.]*[0-9]" | sed "s/^${tag}_//" | sort -V | tail -1 || true
}
mapfile -t elf_files < <(find "$out/lib" -path "$out/lib/cxx" -prune -o -type f -name '*.so*' -print; find "$out/bin" -type f)
{
  echo "commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    git -C "$root" diff --quiet HEAD 2>/dev/null || echo -dirty)"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "build_host_glibc=$(ldd --version | head -1 | grep -o '[0-9.]*$')"
  echo "glibc_min=$(newest GLIBC "${elf_files[@]}")"
  echo "glibcxx_min=$(newest GLIBCXX "${elf_files[@]}")"
  echo "cxx_glibc_min=$(if [ -d "$out/lib/cxx" ]; then newest GLIBC "$out"/lib/cxx/*; fi)"
  echo "ibv_drivers=${ibv_map[*]}"
  echo "cuda=$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | cut -d' ' -f2)"
} >"$out/bundle.env"

# MANIFEST: sha256, size in bytes, path (relative to the bundle), sorted.
(cd "$out" && find . -type f ! -name MANIFEST | sed 's|^\./||' | LC_ALL=C sort | while read -r f; do
  printf '%s %s %s\n' "$(sha256sum "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")" "$f"
done) >"$out/MANIFEST"

bytes=$(du -sb "$out" | cut -f1)
say "$out: $(wc -l <"$out/MANIFEST") files, $((bytes / 1024 / 1024)) MiB ($bytes bytes);" \
  "$(find "$out/bin" -type f | wc -l) executables, $(find "$out/lib" -type f | wc -l) libraries," \
  "$(grep -c '^check ' "$out/checks.sh") checks; $(grep -E '^(glibc|glibcxx|cxx_glibc)_min=' "$out/bundle.env" | tr '\n' ' ')"
[ "$bytes" -le $((max_mib * 1024 * 1024)) ] || die "the bundle is over $max_mib MiB"
say "on the GPU machine: OUT=/some/dir bash $(basename "$out")/run.sh"
