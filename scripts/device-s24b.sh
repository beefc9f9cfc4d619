#!/bin/bash
# Session 24: why one `--codec none` writer costs the 16-core host ~1.1 mount CPU-s per GiB where
# the 2-core machine pays ~0.6: the same build (.devab/new.gz) with the mount free, its threads
# pinned to 4 cores and to 2 (taskset -a after the mount is up), and with one request thread
# (--threads 1); one writer of 2 GiB (`dd bs=1M conv=fsync`) after 256 MiB of warm-up, 4 rounds
# in rotation.
set -u
. scripts/device-setup.sh new
w=/dev/shm/s24b; tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
one() { # VARIANT
  local v=$1 flags=() pid c0 c1 t0 t1
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  [ $v = t1 ] && flags=(--threads 1)
  /tmp/b/new mount $w/b $w/m --gpu off --codec none --staging-dir $w/s "${flags[@]}" > $w/log 2>&1 & pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  case $v in pin4) taskset -a -p -c 0-3 $pid > /dev/null ;; pin2) taskset -a -p -c 0-1 $pid > /dev/null ;; esac
  dd if=/dev/shm/real.2g of=$w/m/warm bs=1M count=256 conv=fsync status=none; rm $w/m/warm
  c0=$(cpu $pid); t0=$(date +%s.%N)
  dd if=/dev/shm/real.2g of=$w/m/f bs=1M conv=fsync status=none
  t1=$(date +%s.%N); c1=$(cpu $pid)
  umount $w/m; wait $pid
  awk -v v=$v -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck 'BEGIN{printf "%-5s write %.2f GB/s %.2f CPU-s/GiB\n", v, 2*2^30/(t1-t0)/1e9, c/tk/2}'
}
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores; $(cat .devab/REV)"
  vs=(free pin4 pin2 t1)
  for r in 0 1 2 3; do for k in 0 1 2 3; do one ${vs[$(((k + r) % 4))]}; done; done
  rm -rf $w
} > $OUT/s24b.txt 2>&1
cat $OUT/s24b.txt
