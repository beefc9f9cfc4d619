#!/bin/bash
# Device script behind BENCHMARKS.md §5 round 5: expects .devab/perf.tgz (perf and its libraries from
# a Debian 12 host) and .devab/sym.gz (the release binary with its symbols).
# Where one writer's time goes through the mount (--codec none and zstd-1, --gpu off, bucket on
# /dev/shm): dd bs=1M conv=fsync of 2 GiB of real files; perf of the mount process.
set -u
mkdir -p /tmp/perf /tmp/b && tar xzf .devab/perf.tgz -C /tmp/perf && gunzip -c .devab/sym.gz > /tmp/b/sym && chmod +x /tmp/b/sym
P="env LD_LIBRARY_PATH=/tmp/perf/lib /tmp/perf/perf"
[ -f /dev/shm/usr2g ] || tar cf - /usr 2>/dev/null | head -c 2G > /dev/shm/usr2g
nproc; uname -r
for codec in none zstd; do
 for rep in 1 2; do
  w=/dev/shm/w; rm -rf $w; mkdir -p $w/b $w/m
  /tmp/b/sym mount $w/b $w/m --gpu off --codec $codec --daemon
  pid=$(pgrep -f "sym mount $w/b" | head -1)
  c0=$(awk '{print $14+$15}' /proc/$pid/stat)
  if [ $rep = 2 ]; then $P record -F 2999 -p $pid -o /tmp/w.data 2>/dev/null & pp=$!; sleep 0.5; fi
  s=$(date +%s.%N); dd if=/dev/shm/usr2g of=$w/m/f bs=1M conv=fsync status=none; e=$(date +%s.%N)
  c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  if [ $rep = 2 ]; then kill -INT $pp; wait $pp 2>/dev/null; fi
  echo "$codec rep$rep: $(awk "BEGIN{printf \"%.2f GB/s, mount %.2f CPU-s/GiB\", 2.147483648/($e-$s), ($c1-$c0)/100/2}")"
  umount $w/m
 done
 $P report -i /tmp/w.data --stdio --no-children --sort comm,dso,sym 2>/dev/null | grep -v "^#" | grep -v "^$" | head -60 > $OUT/w-$codec.txt
 $P report -i /tmp/w.data --stdio --no-children --sort comm 2>/dev/null | grep -v "^#" | grep -v "^$" | head -30 > $OUT/w-$codec-threads.txt
done
