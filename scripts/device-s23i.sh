#!/bin/bash
# Session 23: where a mount's time goes with 8 cold readers (8 x 512 MiB of a tar of /usr), with
# `--codec none` (half of FUSE's rate on this host, device-s23h.sh) and zstd-1, `--gpu off`: a flat
# perf profile of the mount process (.devab/new.gz, a24af8e) by symbol and by thread
# (.devab/perf.tgz: perf and its libraries).
set -u
. scripts/device-setup.sh new
mkdir -p /tmp/perf && tar xzf .devab/perf.tgz -C /tmp/perf
P="env LD_LIBRARY_PATH=/tmp/perf/lib /tmp/perf/perf"
w=/dev/shm/prof; rm -rf $w; mkdir -p $w/none $w/zstd $w/m $w/s
for c in none zstd; do
  /tmp/b/new mount $w/$c $w/m --gpu off --staging-dir $w/s $([ $c = none ] && echo --codec none) --daemon
  p=(); for i in $(seq 8); do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & p+=($!); done; wait "${p[@]}"; umount $w/m
done
for c in none zstd; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  /tmp/b/new mount $w/$c $w/m --gpu off --staging-dir $w/s > /dev/null 2>&1 & pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done; sleep 1
  $P record -F 1999 -p $pid -o /tmp/$c.data > /dev/null 2>&1 & pp=$!; sleep 0.5
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); s=$(date +%s.%N); d=()
  for i in $(seq 8); do dd if=$w/m/f$i of=/dev/null bs=1M status=none & d+=($!); done; wait "${d[@]}"
  e=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  kill -INT $pp; wait $pp; umount $w/m; wait $pid
  echo "$c 8 readers under perf: $(awk "BEGIN{printf \"%.2f GB/s, %.2f CPU-s/GiB\", 4*1.073741824/($e-$s), ($c1-$c0)/100/4}")" >> $OUT/summary.txt
  $P report -i /tmp/$c.data --stdio --no-children --sort dso,sym 2>/dev/null | grep "%" | head -45 > $OUT/perf-$c-sym.txt
  $P report -i /tmp/$c.data --stdio --no-children --sort comm 2>/dev/null | grep "%" | head -15 > $OUT/perf-$c-threads.txt
done
rm -rf $w
cat $OUT/summary.txt; for c in none zstd; do echo "== $c"; head -25 $OUT/perf-$c-sym.txt; cat $OUT/perf-$c-threads.txt; done
