#!/bin/bash
# Session 21, fourth call: with a file's ready frames written in one append and the GPU's frame
# buffers registered at its start (66f51d9), do `--gpu auto` mounts gain from writers keeping as
# many frames in flight as under `--gpu on` (an experiment build: SHRINKFS_EXP_AUTO_WINDOW sets
# the window of `auto`'s writers, 64 by default on 16 cores, 512 under `on`)? 4 and 8 writers of
# 2 GiB of a tar of /usr each (`dd bs=1M conv=fsync`), two idle rounds and one with 16 CPU-bound
# loops beside.
set -u
. scripts/device-setup.sh new
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p21
mw() { # LABEL WRITERS GPU; env from the caller
  local label=$1 n=$2 g=$3
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/new mount $w/b $w/m --gpu $g --staging-dir $w/s --metrics-addr 127.0.0.1:0 > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2 # the GPU's start and warm-up out of the way
  local c0 t0 t1 c1 dds=() i
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  local share; share=$(/tmp/b/new stats $w/m --once --json --interval 0.1 2>/dev/null | grep -o '"gpu_share":[0-9.e-]*' | cut -d: -f2)
  umount $w/m; wait $pid
  awk -v l="$label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck -v sh="${share:-0}" \
    'BEGIN { gib = n / 1073741824; printf "%-26s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB share %.2f\n", l, t1-t0, n/(t1-t0)/1e9, c/tk/gib, sh }'
}
round() { # SUFFIX
  for n in 4 8; do
    mw "off w$n$1" $n off
    mw "auto w$n$1" $n auto
    SHRINKFS_EXP_AUTO_WINDOW=256 mw "auto w$n window 256$1" $n auto
    SHRINKFS_EXP_AUTO_WINDOW=512 mw "auto w$n window 512$1" $n auto
    mw "on w$n$1" $n on
  done
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV); 2 GiB of a tar of /usr per writer"
  echo "## idle round 1"; round ""
  echo "## idle round 2"; round ""
  echo "## 16 CPU-bound loops beside"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  round " busy"
  kill "${hogs[@]}"
} > $OUT/s21d.txt 2>&1
cat $OUT/s21d.txt
