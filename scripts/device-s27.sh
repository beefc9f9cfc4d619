#!/bin/bash
# Session 27's first device call: issue 14's lines at session 26's head (.devab/new.gz) against
# session 24's final build (.devab/old.gz), alternated (one writer of 2 GiB, `--codec none` and
# zstd-1; eight of 512 MiB, zstd-1; each run's files then read back cold), and issue 15's mount
# lines at the head: `--gpu auto` against `off`, 4 and 8 writers of 2 GiB of a tar of /usr each
# (`dd bs=1M conv=fsync`), idle and beside 16 CPU-bound loops. See .devab/REV for the builds.
set -u
. scripts/device-setup.sh new old
{
  cat .devab/REV
  bash scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.2g 3 "none zstd" 1
  bash scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.512m 3 "zstd" 8
} > $OUT/s27-issue14-ab.txt 2>&1
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p27
mw() { # BIN LABEL WRITERS GPU
  local bin=$1 label=$2 n=$3 g=$4
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/$bin mount $w/b $w/m --gpu $g --staging-dir $w/s --metrics-addr 127.0.0.1:0 > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2
  local c0 t0 t1 c1 dds=() i
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do timeout 60 dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  local share; share=$(/tmp/b/$bin stats $w/m --once --json --interval 0.1 2>/dev/null | grep -o '"gpu_share":[0-9.e-]*' | cut -d: -f2)
  umount $w/m; wait $pid
  awk -v b=$bin -v l="$label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck -v sh="${share:-0}" \
    'BEGIN { gib = n / 1073741824; printf "%-4s %-18s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB share %.2f\n", b, l, t1-t0, n/(t1-t0)/1e9, c/tk/gib, sh }'
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(head -1 .devab/REV); 2 GiB of a tar of /usr per writer"
  for n in 4 8; do mw new "off w$n" $n off; mw new "auto w$n" $n auto; mw new "off w$n" $n off; mw new "auto w$n" $n auto; done
  echo "## 16 CPU-bound loops beside"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  for n in 4 8; do mw new "off w$n busy" $n off; mw new "auto w$n busy" $n auto; done
  kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
} > $OUT/s27-issue15-mounts.txt 2>&1
cat $OUT/machine.txt $OUT/s27-issue14-ab.txt $OUT/s27-issue15-mounts.txt
