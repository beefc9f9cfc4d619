#!/bin/bash
# repro-2: two `shrinkfs mount` started at once on the same mount point both succeed and are
# stacked, although OPERATING.md says "a second mount on the same directory is refused (exit 2)
# rather than stacked".
B=/work/bin-new/shrinkfs-s31base; export SHRINKFS_CONFIG=
T=/tmp/probe31e/rp2; rm -rf $T; mkdir -p $T/b1 $T/b2 $T/m
stacked=0; tries=0
for i in $(seq 1 10); do
  tries=$i
  timeout 20 $B mount $T/b1 $T/m --daemon --log-file $T/l1 2>/dev/null & p1=$!
  timeout 20 $B mount $T/b2 $T/m --daemon --log-file $T/l2 2>/dev/null & p2=$!
  wait $p1; r1=$?; wait $p2; r2=$?
  n=$(grep -c " $T/m " /proc/mounts)
  for k in 1 2 3; do mountpoint -q $T/m && $B unmount $T/m >/dev/null 2>&1; done
  for pid in $(pgrep -f "shrinkfs-s31base mount $T/"); do kill -9 $pid; done
  umount -l $T/m 2>/dev/null
  if [ "$n" -ge 2 ]; then stacked=1; echo "attempt $i: rc1=$r1 rc2=$r2, $n mounts stacked at $T/m"; break; fi
done
[ $stacked = 1 ] && echo "FAIL two concurrent mounts at one mount point both exited 0 ($r1/$r2) and were stacked (attempt $tries)" || echo "PASS no stacking in $tries attempts"
