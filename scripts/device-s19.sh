#!/bin/bash
# One call on the GPU host, under $OUT (session 19): the GPU tests of the typed-config code
# (.devab/gputest.gz, .devab/gpumetrics.gz, with --include-ignored), the CPU's shape (lscpu),
# cold reads of the session's base (.devab/old.gz) against its head (.devab/new.gz), the head's
# writers (1 and 8, --codec none and zstd-1), `bench codecs --input` on the same real bytes (the
# cores' own zstd ceiling), and perf profiles of 8 zstd-1 writers and 8 cold readers (.devab/perf.tgz).
set -u
. scripts/device-setup.sh old new gputest gpumetrics
lscpu > $OUT/lscpu.txt 2>&1
{
  echo "== codec/tests/gpu.rs"; timeout 120 /tmp/b/gputest --include-ignored 2>&1 | tail -12
  echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -8
} > $OUT/gpu-tests.txt
BINS="old new" REPS=2 timeout 150 scripts/device-cold-reads.sh > $OUT/cold-reads.txt 2>&1
rm -rf /dev/shm/cold
AB_VARIANTS=new timeout 120 scripts/ab-write.sh /tmp/b/new /tmp/b/new /dev/shm/real.2g 2 "none zstd" 1 > $OUT/ab-1.txt 2>&1
AB_VARIANTS=new timeout 120 scripts/ab-write.sh /tmp/b/new /tmp/b/new /dev/shm/real.512m 2 "zstd none" 8 > $OUT/ab-8.txt 2>&1
timeout 90 /tmp/b/new bench codecs --corpora logs --input /dev/shm/real.2g --size 1G --frame-sizes 1M --codecs zstd,lz4 --runs 2 > $OUT/bench-codecs-real.txt 2>&1
# Profiles: the mount process of the head, 8 zstd-1 writers of 512 MiB, then 8 cold readers.
mkdir -p /tmp/perf && tar xzf .devab/perf.tgz -C /tmp/perf
P="env LD_LIBRARY_PATH=/tmp/perf/lib /tmp/perf/perf"
w=/dev/shm/pw; rm -rf $w; mkdir -p $w/b $w/m $w/s
/tmp/b/new mount $w/b $w/m --gpu off --codec zstd --staging-dir $w/s --daemon
pid=$(pgrep -f "new mount $w/b" | head -1)
$P record -F 999 -g -p $pid -o /tmp/w8.data 2>/dev/null & pp=$!; sleep 0.5
s=$(date +%s.%N); for i in $(seq 8); do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & done; wait $(jobs -p | grep -v "^$pp$"); e=$(date +%s.%N)
kill -INT $pp; wait $pp 2>/dev/null
echo "8 writers under perf: $(awk "BEGIN{printf \"%.2f GB/s\", 4*1.073741824/($e-$s)}")" > $OUT/perf-summary.txt
umount $w/m; sync; echo 3 > /proc/sys/vm/drop_caches
/tmp/b/new mount $w/b $w/m --gpu off --staging-dir $w/s --daemon
pid=$(pgrep -f "new mount $w/b" | head -1)
$P record -F 999 -g -p $pid -o /tmp/r8.data 2>/dev/null & pp=$!; sleep 0.5
s=$(date +%s.%N); for i in $(seq 8); do dd if=$w/m/f$i of=/dev/null bs=1M status=none & done; wait $(jobs -p | grep -v "^$pp$"); e=$(date +%s.%N)
kill -INT $pp; wait $pp 2>/dev/null
echo "8 readers under perf: $(awk "BEGIN{printf \"%.2f GB/s\", 4*1.073741824/($e-$s)}")" >> $OUT/perf-summary.txt
umount $w/m
for x in w8 r8; do
  $P report -i /tmp/$x.data --stdio --no-children --sort dso,sym 2>/dev/null | grep -v "^#" | grep -v "^$" | grep "%" | head -70 > $OUT/perf-$x-sym.txt
  $P report -i /tmp/$x.data --stdio --no-children --sort comm 2>/dev/null | grep -v "^#" | grep -v "^$" | head -30 > $OUT/perf-$x-threads.txt
  $P report -i /tmp/$x.data --stdio --children --sort sym -g caller,0.5,callee --percent-limit 3 2>/dev/null | grep -v "^$" | head -400 > $OUT/perf-$x-children.txt
done
rm -rf $w
echo done
