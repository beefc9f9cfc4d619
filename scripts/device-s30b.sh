#!/bin/bash
# Session 30, second call: after the first (scripts/device-s30.sh) found `auto` slower with the
# encoded bytes counted, an experiment build (.devab/new.gz; a writer short of room now takes
# its own frames one at a time instead of draining its pipeline; S30_ROOM sets the room a frame
# holds, in frame sizes) against the build before (.devab/old.gz), alternated, idle host: 4 and
# 8 writers of 2 GiB of a tar of /usr under `auto`, 8 under `off`, and 8 under `auto` with
# --memory-limit 256M; each mount's peak resident size.
set -u
. scripts/device-setup.sh new old
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p30
mw() { # BIN LABEL WRITERS GPU ROOM [MOUNT FLAGS...]
  local bin=$1 label=$2 n=$3 g=$4 room=$5; shift 5
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  S30_ROOM=$room /tmp/b/$bin mount $w/b $w/m --gpu $g --staging-dir $w/s "$@" > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2
  local c0 t0 t1 c1 dds=() i hwm
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do timeout 60 dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  hwm=$(awk '/VmHWM/ {print int($2/1024)}' /proc/$pid/status)
  umount $w/m; wait $pid
  awk -v l="$bin room=$room $label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck -v h=$hwm \
    'BEGIN { gib = n / 1073741824; printf "%-34s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB peak %5d MiB\n", l, t1-t0, n/(t1-t0)/1e9, c/tk/gib, h }'
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV); idle"
  for r in 1 2; do for n in 4 8; do for v in "old 2" "new 2" "new 1"; do set -- $v; mw $1 "auto w$n" $n auto $2; done; done; done
  for v in "old 2" "new 2" "new 1"; do set -- $v; mw $1 "off w8" 8 off $2; mw $1 "auto w8 256M" 8 auto $2 --memory-limit 256M; done
} > $OUT/s30b.txt 2>&1
cat $OUT/machine.txt $OUT/s30b.txt
