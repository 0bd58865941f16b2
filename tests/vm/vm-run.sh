#!/usr/bin/env bash
# Runs one command inside a throw-away qemu VM (TCG) whose root is the host's
# root, read-only, with the kernel's soft-RoCE device rxe0 up; prints the
# command's output and exits with its status. See tests/vm/README.md.
#
#   tests/vm/vm-run.sh [options] -- COMMAND [ARGS...]
#
# Options:
#   --timeout S   the command's time limit inside the VM (default 600); on
#                 expiry the status is 124, as with timeout(1)
#   --cache DIR   where the Debian kernel and the initramfs are kept between
#                 runs (default: $FABRIX_VM_CACHE, else build/vm-cache in the
#                 source tree)
#   --mem MiB     guest memory (default 2048)
#   --smp N       guest CPUs (default 2)
#   --accel A     qemu accelerator (default tcg; kvm where KVM works - on the
#                 machines this was written on /dev/kvm exists but does not)
#   --rw DIR      also make host directory DIR writable inside the VM (at the
#                 same path); may be given several times
#   --console     print the guest's console log (kernel + init) afterwards
#   --strict      a command that exits 77 (skipped) fails instead (status 1):
#                 for tests that must find rxe0 in the VM
#   --node N      one of two VMs joined by a link (vm-pair.sh): node N (1 or
#                 2) gets 10.77.1.N/24 on a virtio NIC, and rxe0 runs on it
#                 instead of on the veth pair; needs --link
#   --link listen:PATH | connect:PATH
#                 that NIC's cable, a unix stream socket: the listening VM
#                 makes PATH, the other connects to it once it exists. Given
#                 twice, a second NIC (rail 2): 10.77.2.N/24 and rxe1 on it
#
# The command runs in the caller's working directory with the caller's
# environment (minus TMPDIR), as root, with `ulimit -l unlimited`, and with
# FABRIX_VM=1, FABRIX_VM_RDMA_DEVICE=rxe0, FABRIX_VM_GID_INDEX (the RoCE v2
# GID of rxe0's IPv4 address) and FABRIX_VM_IPV4 set. Paths are host paths.
# /tmp, /var/tmp, /run and /dev/shm are empty tmpfs in the VM; everything
# else but the --rw directories is read-only.
#
# Exit status: the command's; 77 only when qemu or the kernel package cannot
# be had (meson reports it skipped); 125 when the VM itself failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
timeout_s=600
mem=2048
smp=2
accel=tcg
cache=${FABRIX_VM_CACHE:-$here/../../build/vm-cache}
rw_dirs=()
show_console=0
strict=0
node=""
links=()

usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}" >&2
  exit 2
}
while (($#)); do
  case $1 in
    --timeout) timeout_s=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --smp) smp=$2; shift 2 ;;
    --accel) accel=$2; shift 2 ;;
    --rw) rw_dirs+=("$(cd "$2" && pwd)"); shift 2 ;;
    --console) show_console=1; shift ;;
    --strict) strict=1; shift ;;
    --node) node=$2; shift 2 ;;
    --link) links+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) usage ;;
  esac
done
(($#)) || usage
case $node in "" | 1 | 2) ;; *) usage ;; esac
for l in "${links[@]}"; do
  case $l in listen:/* | connect:/*) ;; *) usage ;; esac
done
((${#links[@]} <= 2)) || usage
{ [ -n "$node" ] && ((${#links[@]})); } || { [ -z "$node" ] && ((${#links[@]} == 0)); } || usage

skip() { echo "vm-run: skipped: $*" >&2; exit 77; }
die() { echo "vm-run: error: $*" >&2; exit 125; }

qemu=$(command -v qemu-system-x86_64) || skip "qemu-system-x86_64 not installed (package qemu-system-x86)"
busybox=""
for b in /bin/busybox /usr/bin/busybox; do
  # The initramfs has no libraries: only a static busybox (busybox-static) works there.
  if [ -x "$b" ] && ! LC_ALL=C ldd "$b" >/dev/null 2>&1; then busybox=$b; break; fi
done
[ -n "$busybox" ] || die "no static busybox found (install busybox-static)"

mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

# --- the kernel: Debian's linux-image-amd64, unpacked into the cache --------
kernel_package() {  # the versioned package linux-image-amd64 depends on
  apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\) *$/\1/p' | head -n 1
}
fetch_kernel() {
  local pkg dl
  pkg=$(kernel_package)
  if [ -z "$pkg" ] && [ "$(id -u)" -eq 0 ]; then
    apt-get update -q >&2 || true
    pkg=$(kernel_package)
  fi
  [ -n "$pkg" ] || skip "no linux-image-amd64 package known to apt"
  dl=$(mktemp -d "$cache/download.XXXXXX")
  chmod 755 "$dl"  # apt's sandbox user writes there when it can
  if ! (cd "$dl" && apt-get download -q "$pkg" >&2); then
    if [ "$(id -u)" -eq 0 ]; then apt-get update -q >&2 || true; fi
    (cd "$dl" && apt-get download -q "$pkg" >&2) || { rm -rf "$dl"; skip "cannot download $pkg"; }
  fi
  rm -rf "$cache/kernel.new"
  dpkg -x "$dl"/*.deb "$cache/kernel.new" || die "dpkg -x $pkg failed"
  rm -rf "$dl"
  local ver=${pkg#linux-image-}
  [ -f "$cache/kernel.new/boot/vmlinuz-$ver" ] || die "$pkg has no boot/vmlinuz-$ver"
  "$busybox" depmod -b "$cache/kernel.new" "$ver" || die "depmod failed"
  rm -rf "$cache/kernel"
  mv "$cache/kernel.new" "$cache/kernel"
  echo "vm-run: kernel $ver unpacked into $cache/kernel" >&2
}

# Modules the guest loads (in this order), each with its dependencies.
guest_modules=(virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci
  netfs fscache 9pnet 9pnet_virtio 9p
  crc32_generic udp_tunnel ip6_udp_tunnel ib_core ib_uverbs iw_cm ib_cm rdma_cm rdma_ucm rdma_rxe veth dummy
  failover net_failover virtio_net)

build_initramfs() {  # $1 = kernel version, $2 = output file
  local ver=$1 out=$2 root moddir line m
  root=$(mktemp -d "$cache/initramfs.XXXXXX")
  mkdir -p "$root"/{bin,dev,proc,sys,newroot,results,lib/modules/"$ver"}
  cp "$busybox" "$root/bin/busybox"
  cp "$here/guest-init.sh" "$root/init"
  chmod 755 "$root/init"
  printf '%s\n' "${guest_modules[@]}" >"$root/modules"
  moddir=$cache/kernel/lib/modules/$ver
  local -A want=()
  for m in "${guest_modules[@]}"; do
    line=$(grep -E "/$m\.ko(\.xz|\.zst|\.gz)?:" "$moddir/modules.dep") || die "module $m not in $ver"
    for f in ${line/:/}; do want[$f]=1; done
  done
  for f in "${!want[@]}"; do
    mkdir -p "$root/lib/modules/$ver/$(dirname "$f")"
    cp "$moddir/$f" "$root/lib/modules/$ver/$f"
  done
  "$busybox" depmod -b "$root" "$ver" || die "depmod for the initramfs failed"
  (cd "$root" && find . | "$busybox" cpio -o -H newc 2>/dev/null) >"$out.tmp"
  mv "$out.tmp" "$out"
  rm -rf "$root"
}

prepare() {  # under the cache lock: kernel + initramfs, once
  [ -d "$cache/kernel/boot" ] || fetch_kernel
  local vmlinuz
  vmlinuz=$(ls "$cache"/kernel/boot/vmlinuz-* 2>/dev/null | head -n 1)
  [ -n "$vmlinuz" ] || die "no kernel in $cache/kernel"
  kver=${vmlinuz##*/vmlinuz-}
  local key
  key=$(cat "$here/guest-init.sh" "$busybox" <(printf '%s\n' "$kver" "${guest_modules[@]}") | sha256sum | cut -c1-16)
  initrd=$cache/initramfs-$key.cpio
  [ -f "$initrd" ] || build_initramfs "$kver" "$initrd"
  kernel=$vmlinuz
}
exec 9>"$cache/.lock"
flock 9
prepare
flock -u 9

# --- the run ----------------------------------------------------------------
run=$(mktemp -d "$cache/run.XXXXXX")
qemu_pid=""
cleanup() {
  [ -z "$qemu_pid" ] || kill "$qemu_pid" 2>/dev/null || true
  rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The script the guest runs in the chroot: environment, working directory,
# rxe0 setup (guest-setup.sh), then the command under its time limit.
if [ -n "$node" ]; then export FABRIX_VM_NODE=$node; else unset FABRIX_VM_NODE; fi
{
  echo '#!/bin/bash'
  export -p | grep -Ev '^declare -x (PWD|OLDPWD|SHLVL|_|TMPDIR|TMP|TEMP)(=|$)' || true
  printf 'cd %q || exit 125\n' "$PWD"
  printf 'source %q || exit 125\n' "$here/guest-setup.sh"
  printf 'timeout --kill-after=10 %q' "$timeout_s"
  printf ' %q' "$@"
  echo
} >"$run/run.sh"
# The guest mounts empty tmpfs on /tmp, /var/tmp and /run; a source tree or
# working directory under one of them (a CI clone in /tmp) is bound back
# from the host's view, read-only like the rest of the host root.
keep_dirs=()
for d in "$(cd "$here/../.." && pwd)" "$PWD"; do
  case $d in /tmp/* | /var/tmp/* | /run/*) keep_dirs+=("$d") ;; esac
done
{
  printf "run_dir='%s'\n" "$run"
  printf "rw_dirs='%s'\n" "${rw_dirs[*]}"
  printf "keep_dirs='%s'\n" "${keep_dirs[*]}"
} >"$run/guest.conf"
for d in "$run" "${rw_dirs[@]}" "${keep_dirs[@]}"; do
  case $d in *[[:space:]]*) die "paths with spaces are not supported: $d" ;; esac
done

virtfs=(-virtfs "local,path=/,mount_tag=hostroot,readonly=on,multidevs=remap,security_model=none"
  -virtfs "local,path=$run,mount_tag=results,multidevs=remap,security_model=none")
i=0
for d in "${rw_dirs[@]}"; do
  virtfs+=(-virtfs "local,path=$d,mount_tag=rw$i,multidevs=remap,security_model=none")
  i=$((i + 1))
done

# Rail R's NIC has the MAC 52:54:00:77:0R:0N: guest-setup.sh finds it by that.
nic=(-nic none)
((${#links[@]} == 0)) || nic=()
rail=0
for l in "${links[@]}"; do
  rail=$((rail + 1))
  path=${l#*:}
  server=off
  [ "${l%%:*}" = connect ] || server=on
  nic+=(-netdev "stream,id=link$rail,server=$server,addr.type=unix,addr.path=$path"
    -device "virtio-net-pci,netdev=link$rail,mac=52:54:00:77:0$rail:0$node")
done

cpu=max
[ "$accel" = tcg ] || cpu=host
start=$(date +%s.%N)
# Boot + setup normally take well under a minute; the margin covers a loaded host.
timeout --kill-after=10 $((timeout_s + 300)) "$qemu" -accel "$accel" -cpu "$cpu" -m "$mem" -smp "$smp" \
  -nodefaults -no-user-config -display none -no-reboot "${nic[@]}" \
  -kernel "$kernel" -initrd "$initrd" \
  -append "console=ttyS0 panic=-1 quiet loglevel=4 rdinit=/init" \
  -serial "file:$run/console.log" "${virtfs[@]}" </dev/null &
qemu_pid=$!
qemu_status=0
wait "$qemu_pid" || qemu_status=$?
qemu_pid=""
end=$(date +%s.%N)

[ ! -f "$run/output" ] || cat "$run/output"
if ((show_console)) || [ ! -f "$run/status" ]; then
  echo "---- vm-run: guest console ----" >&2
  cat "$run/console.log" >&2 2>/dev/null || true
fi
if [ ! -f "$run/status" ]; then
  ((qemu_status != 124 && qemu_status != 137)) || die "the VM did not finish within $((timeout_s + 300)) s"
  die "the VM stopped without a result (qemu exit $qemu_status)"
fi
status=$(cat "$run/status")
echo "vm-run: exit $status, VM wall time $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s" \
  "(boot to command $(cat "$run/boot_s" 2>/dev/null || echo '?') s)" >&2
if ((strict)) && [ "$status" = 77 ]; then
  echo "vm-run: the command skipped (77) inside the VM, where rxe0 exists: failing (--strict)" >&2
  exit 1
fi
exit "$status"
