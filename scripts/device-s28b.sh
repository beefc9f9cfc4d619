#!/bin/bash
# Session 28 probe: do 4 writers under `--gpu auto` on a busy host (16 CPU-bound loops) wait for
# the CPU workers, which finish every frame the GPU compressed (checksum, header) and store
# incompressible frames, at the process's priority? The workers' threads (and then the runtime's
# as well) are reniced to -10 from outside once the mount is up and has written 256 MiB a file;
# `off` beside for the ratio. Build .devab/new.gz (.devab/REV).
set -u
. scripts/device-setup.sh new
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p28
head -c $((256 << 20)) /dev/shm/real.2g > /dev/shm/real.256m
mw() { # LABEL WRITERS GPU RENICE(pattern or -) EXTRA...   (WARM=0 skips the 256 MiB a file first)
  local label=$1 n=$2 g=$3 re=$4; shift 4
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/new mount $w/b $w/m --gpu $g --staging-dir $w/s "$@" > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2
  local i dds=()
  if [ "${WARM:-1}" = 1 ]; then
    for i in $(seq $n); do dd if=/dev/shm/real.256m of=$w/m/warm$i bs=1M conv=fsync status=none & dds+=($!); done
    wait "${dds[@]}"; dds=()
  fi
  if [ "$re" != - ]; then
    for t in /proc/$pid/task/*; do grep -qE "$re" $t/comm && renice -n -10 -p ${t##*/} > /dev/null; done
  fi
  local c0 t0 t1 c1
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do timeout 60 dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  umount $w/m; wait $pid
  awk -v l="$label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck \
    'BEGIN { gib = n / 1073741824; printf "%-40s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB\n", l, t1-t0, n/(t1-t0)/1e9, c/tk/gib }'
}
if [ "${S28_WARMTEST:-0}" = 1 ]; then
  {
    echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV); 16 busy loops; with and without 256 MiB a file written first"
    hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
    for r in 1 2 3; do
      WARM=0 mw "off w4 busy, cold mount" 4 off -
      WARM=0 mw "auto w4 busy, cold mount" 4 auto -
      WARM=1 mw "off w4 busy, after 256 MiB" 4 off -
      WARM=1 mw "auto w4 busy, after 256 MiB" 4 auto -
    done
    kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
  } > $OUT/s28c.txt 2>&1
  cat $OUT/machine.txt $OUT/s28c.txt
  exit
fi
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV); 16 busy loops"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  for r in 1 2 3; do
    mw "off w4 busy" 4 off -
    mw "auto w4 busy" 4 auto -
    mw "auto w4 busy, workers -10" 4 auto '^shrinkfs-cpu'
    mw "auto w4 busy, workers+runtime -10" 4 auto '^shrinkfs-cpu|^tokio'
  done
  for r in 1 2; do
    mw "off w8 busy" 8 off -
    mw "auto w8 busy" 8 auto -
    mw "auto w8 busy, workers -10" 8 auto '^shrinkfs-cpu'
  done
  kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
} > $OUT/s28b.txt 2>&1
cat $OUT/machine.txt $OUT/s28b.txt
