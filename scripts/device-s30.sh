#!/bin/bash
# Session 30: the memory budget counting a frame's encoded bytes until they are in the spill
# (.devab/new.gz) against the build before (.devab/old.gz; see .devab/REV), alternated on an idle
# host: issue 14's and 15's mount lines that the budget could hold back (4 and 8 writers of 2 GiB
# of a tar of /usr, `dd bs=1M conv=fsync`, `--gpu off` and `auto`, default --memory-limit), each
# mount's peak resident size; then one writer of 2 GiB with `--codec none` and zstd-1 and its
# cold read (scripts/ab-write.sh, two runs); then 8 writers under --memory-limit 256M.
set -u
. scripts/device-setup.sh new old
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p30
mw() { # BIN LABEL WRITERS GPU [MOUNT FLAGS...]
  local bin=$1 label=$2 n=$3 g=$4; shift 4
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/$bin mount $w/b $w/m --gpu $g --staging-dir $w/s "$@" > $w/log 2>&1 &
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
  awk -v l="$bin $label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck -v h=$hwm \
    'BEGIN { gib = n / 1073741824; printf "%-28s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB peak %5d MiB\n", l, t1-t0, n/(t1-t0)/1e9, c/tk/gib, h }'
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV); idle"
  for r in 1 2; do for n in 4 8; do for g in off auto; do for b in old new; do mw $b "$g w$n" $n $g; done; done; done; done
  for b in old new; do mw $b "off w8 256M" 8 off --memory-limit 256M; mw $b "auto w8 256M" 8 auto --memory-limit 256M; done
  bash scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.2g 2 "none zstd" 1
} > $OUT/s30-idle.txt 2>&1
cat $OUT/machine.txt $OUT/s30-idle.txt
