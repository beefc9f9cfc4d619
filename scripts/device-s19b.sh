#!/bin/bash
# Session 19, second call on the GPU host, under $OUT: the head before (.devab/old.gz) against the
# build with one pwritev per frame, one append at a time into a file (a lock) and crc-fast (.devab/new.gz):
# 1 writer of 2 GiB and 8 writers of 512 MiB, --codec none and zstd-1, --gpu off, real files; then
# a perf profile of the new build's mount under one --codec none writer (.devab/perf.tgz).
set -u
. scripts/device-setup.sh old new
timeout 200 scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.2g 5 none 1 > $OUT/ab-1n.txt 2>&1
timeout 120 scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.2g 3 zstd 1 > $OUT/ab-1.txt 2>&1
timeout 200 scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.512m 2 zstd 8 > $OUT/ab-8.txt 2>&1
mkdir -p /tmp/perf && tar xzf .devab/perf.tgz -C /tmp/perf
P="env LD_LIBRARY_PATH=/tmp/perf/lib /tmp/perf/perf"
w=/dev/shm/pw; rm -rf $w; mkdir -p $w/b $w/m $w/s
/tmp/b/new mount $w/b $w/m --gpu off --codec none --staging-dir $w/s --daemon
pid=$(pgrep -f "new mount $w/b" | head -1)
$P record -F 1999 -g -p $pid -o /tmp/w1.data 2>/dev/null & pp=$!; sleep 0.5
dd if=/dev/shm/real.2g of=$w/m/f bs=1M conv=fsync status=none
kill -INT $pp; wait $pp 2>/dev/null
umount $w/m; rm -rf $w
{ $P report -i /tmp/w1.data --stdio --no-children --sort dso,sym 2>/dev/null | grep -v "^#" | grep -v "^$" | grep "%" | grep -v "^ *[|-]" | head -50
  echo "== threads"; $P report -i /tmp/w1.data --stdio --no-children --sort comm 2>/dev/null | grep -v "^#" | grep -v "^$" | grep "%" | grep -v "^ *[|-]" | head -30
  echo "== callers"; $P report -i /tmp/w1.data --stdio --no-children --sort sym -G --percent-limit 3 2>/dev/null | grep -v "^#" | grep -v "^$" | head -300
} > $OUT/perf-w1-none.txt
cat $OUT/ab-1n.txt $OUT/ab-1.txt $OUT/ab-8.txt
