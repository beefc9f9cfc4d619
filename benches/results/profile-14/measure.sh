#!/usr/bin/env bash
# Issue #14 step 1 measurements: 1 writer (dd bs=1M conv=fsync) and 1 cold reader (unmount, drop_caches,
# remount, dd bs=1M) with --codec none and --codec zstd (level 1), --gpu off, bucket and staging on /dev/shm.
# Mount CPU = utime+stime of the mount process from /proc/PID/stat around the dd. Usage: measure.sh RUNS
cd /work/notes; runs=${1:-5}; source ./harness.sh
echo "# $(date -u +%FT%TZ) binary $B ($($B --version 2>/dev/null | head -1)) data $DATA ($(stat -c %s $DATA) bytes)"
for codec in none zstd; do for r in $(seq 1 $runs); do
  quiet_wait; rm -rf $BUCKET/f.$codec $STAGE; mount_fs --codec $codec || exit 1
  b=$(cpu_of $MPID); t=$(dd if=$DATA of=$MNT/f.$codec bs=1M conv=fsync 2>&1 | tail -1 | awk '{print $(NF-3), $(NF-1), $NF}'); a=$(cpu_of $MPID)
  echo "write codec=$codec run$r: $t | mount $(cpu_delta "$b" "$a") | load $(cut -d' ' -f1 /proc/loadavg)"
  umount_fs
done; done
for codec in none zstd; do for r in $(seq 1 $runs); do
  quiet_wait; echo 3 > /proc/sys/vm/drop_caches; mount_fs --codec none || exit 1
  b=$(cpu_of $MPID); t=$(dd if=$MNT/f.$codec of=/dev/null bs=1M 2>&1 | tail -1 | awk '{print $(NF-3), $(NF-1), $NF}'); a=$(cpu_of $MPID)
  echo "cold read of f.$codec run$r: $t | mount $(cpu_delta "$b" "$a") | load $(cut -d' ' -f1 /proc/loadavg)"
  umount_fs
done; done
for r in $(seq 1 $runs); do
  quiet_wait; t=$(dd if=$DATA of=/dev/shm/x bs=1M conv=fsync 2>&1 | tail -1 | awk '{print $(NF-3), $(NF-1), $NF}'); rm -f /dev/shm/x
  echo "baseline dd to tmpfs run$r: $t"
  /usr/bin/time -f "baseline zstd -1 -T2 run$r: wall %e s, user %U s, sys %S s" zstd -q -1 -T2 -c $DATA > /dev/shm/real.1g.zst
  /usr/bin/time -f "baseline zstd -d run$r: wall %e s, user %U s, sys %S s" zstd -q -d -c /dev/shm/real.1g.zst > /dev/null
done 2>&1
