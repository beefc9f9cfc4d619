#!/usr/bin/env bash
# Measurement harness for issue #14, step 1 (profile). Sourced by the run scripts.
B=${B:-/dev/shm/shrinkfs.base}
MNT=/mnt/p
BUCKET=/dev/shm/bucket
STAGE=/dev/shm/staging
DATA=/dev/shm/real.1g
TCK=$(getconf CLK_TCK)

mount_fs() {  # $@: extra mount options
  mkdir -p $BUCKET $STAGE $MNT
  $B mount $BUCKET $MNT --gpu off --staging-dir $STAGE "$@" >/tmp/mount.log 2>&1 &
  MPID=$!
  for i in $(seq 1 100); do grep -q " $MNT fuse" /proc/mounts && break; sleep 0.1; done
  grep -q " $MNT fuse" /proc/mounts || { echo "mount failed"; cat /tmp/mount.log; return 1; }
}
umount_fs() {
  umount $MNT; wait $MPID 2>/dev/null
}
cpu_of() {  # utime+stime ticks of a process (all threads)
  awk '{print $14, $15}' /proc/$1/stat
}
cpu_delta() { # before after -> "user sys" in seconds
  echo "$1 $2" | awk -v t=$TCK '{printf "user %.2f s, sys %.2f s, total %.2f s", ($3-$1)/t, ($4-$2)/t, ($3-$1+$4-$2)/t}'
}
quiet_wait() {  # wait (up to 5 min) until the host is >=90% idle over half a second (nothing else running)
  for i in $(seq 1 300); do
    read -r _ u n s id io irq sirq st _ < /proc/stat; t1=$((u+n+s+id+io+irq+sirq+st)); i1=$id
    sleep 0.5
    read -r _ u n s id io irq sirq st _ < /proc/stat; t2=$((u+n+s+id+io+irq+sirq+st)); i2=$id
    [ $(( 100*(i2-i1) / (t2-t1+1) )) -ge 90 ] && return 0
    sleep 1
  done; echo "(host busy)"; return 1
}
