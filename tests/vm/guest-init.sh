#!/bin/busybox sh
# /init of the VM's initramfs (built by vm-run.sh; busybox-static + modules).
# Loads the modules, mounts the host's root (9p, read-only) and the results
# share, chroots into the host root and runs the run.sh that vm-run.sh wrote,
# then writes its exit status next to its output and powers off.
/bin/busybox mount -t devtmpfs dev /dev
exec </dev/console >/dev/console 2>&1
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys

fail() {  # no result file: the host reports the VM as failed (125)
  echo "vm-init: $*"
  poweroff -f
}

while read -r m; do
  modprobe "$m" || fail "modprobe $m failed"
done </modules

mount_9p() {  # tag dir options; the virtio device can take a moment to appear
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    mount -t 9p -o "trans=virtio,version=9p2000.L,msize=262144,$3" "$1" "$2" 2>/dev/null && return 0
    sleep 0.2
  done
  mount -t 9p -o "trans=virtio,version=9p2000.L,msize=262144,$3" "$1" "$2"
}
mount_9p results /results cache=none || fail "cannot mount the results share"
mount_9p hostroot /newroot ro,cache=loose || fail "cannot mount the host root"
. /results/guest.conf

n=/newroot
mkdir -p /hostview
mount --bind $n /hostview || fail "cannot keep a view of the host root"
mount -t devtmpfs dev $n/dev || fail "devtmpfs"
mkdir -p $n/dev/pts $n/dev/shm
mount -t devpts devpts $n/dev/pts || fail "devpts"
mount -t tmpfs -o mode=1777 shm $n/dev/shm || fail "tmpfs on /dev/shm"
mount -t proc proc $n/proc || fail "proc"
mount -t sysfs sys $n/sys || fail "sysfs"
for d in /tmp /var/tmp /run; do
  mount -t tmpfs -o mode=1777 tmp $n$d || fail "tmpfs on $d"
done
for d in $keep_dirs; do
  mkdir -p $n$d 2>/dev/null
  mount --bind /hostview$d $n$d || fail "cannot bind $d back over the tmpfs"
done
mkdir -p $n$run_dir 2>/dev/null
mount --bind /results $n$run_dir || fail "cannot bind the results share at $run_dir"
i=0
for d in $rw_dirs; do
  mkdir -p $n$d 2>/dev/null
  mount_9p rw$i $n$d cache=none || fail "cannot mount $d writable"
  i=$((i + 1))
done

ulimit -l unlimited
ulimit -n 65536 2>/dev/null || true
cut -d' ' -f1 /proc/uptime >/results/boot_s
chroot $n /bin/bash $run_dir/run.sh >/results/output 2>&1
echo $? >/results/status.tmp
mv /results/status.tmp /results/status
sync
poweroff -f
