#!/bin/bash
# Session 27, probe: with the request threads at -10 (.devab/new.gz), would the runtime's threads
# (tokio workers and its blocking pool, which writes a local bucket's files) gain from -10 too?
# 4 writers of 2 GiB of a tar of /usr, 16 busy loops beside; each mount first writes 256 MiB (so
# the blocking pool has grown), then its tokio threads are reniced from outside, or not.
set -u
. scripts/device-setup.sh new
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p27
mw() { # LABEL WRITERS GPU RENICE_TOKIO(0|1)
  local label=$1 n=$2 g=$3 rt=$4
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/new mount $w/b $w/m --gpu $g --staging-dir $w/s > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2
  head -c 256M /dev/shm/real.2g > $w/m/warm; rm $w/m/warm
  local t k=0
  if [ "$rt" = 1 ]; then for t in /proc/$pid/task/*; do grep -q '^tokio' $t/comm && renice -n -10 -p ${t##*/} > /dev/null && k=$((k+1)); done; fi
  local c0 t0 t1 c1 dds=() i
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do timeout 60 dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  umount $w/m; wait $pid
  awk -v l="$label (tokio reniced: $k)" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck \
    'BEGIN { gib = n / 1073741824; printf "%-34s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB\n", l, t1-t0, n/(t1-t0)/1e9, c/tk/gib }'
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV); 16 busy loops"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  for r in 1 2; do for g in off auto; do for rt in 0 1; do mw "$g w4 busy" 4 $g $rt; done; done; done
  kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
} > $OUT/s27d-tokio.txt 2>&1
cat $OUT/s27d-tokio.txt
