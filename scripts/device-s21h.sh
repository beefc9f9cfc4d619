#!/bin/bash
# Session 21, eighth call (34bf6c0): `bench fs` with a `--gpu off` and a `--gpu auto` mount side
# by side on real files (issue 15's "never more than 5% slower" line). At 721f6bd the same bench
# hung in its 4 writers on the `auto` mount (fixed in 34bf6c0); what that call left is cleared
# first.
set -u
for m in /dev/shm/p21/auto /dev/shm/p21/off; do umount -l $m 2>/dev/null; done
pkill -9 -f "/tmp/b/new" 2>/dev/null; sleep 1; rm -rf /dev/shm/p21
. scripts/device-setup.sh new
w=/dev/shm/p21; rm -rf $w; mkdir -p $w/boff $w/bauto $w/off $w/auto
/tmp/b/new mount $w/boff $w/off --gpu off --daemon
/tmp/b/new mount $w/bauto $w/auto --gpu auto --daemon
sleep 2
timeout 240 /tmp/b/new bench fs --target off=$w/off --target auto=$w/auto --backend off=$w/boff --backend auto=$w/bauto \
  --data-file /dev/shm/real.2g --size 1G --files 1000 --jobs 4 \
  --workloads seq-write,seq-read,small-files,ls,par-write,par-read --json $OUT/bench-fs-off-auto.json > $OUT/bench-fs-off-auto.txt 2>&1
echo "rc=$?" >> $OUT/bench-fs-off-auto.txt
umount $w/off; umount $w/auto
cat $OUT/bench-fs-off-auto.txt | tail -60
