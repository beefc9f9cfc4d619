#!/bin/bash
# Session 23 experiment: does raising the mount's own threads (FUSE request threads and the tokio
# runtime's, which append frames; not the CPU codec workers) to nice -10, as the GPU's launch
# threads already are, lift `auto` with 4 writers beside 16 CPU-bound loops (1.5x `off` where 2x
# is asked)? .devab/prio.gz against .devab/new.gz (5fa18b0): 4 and 8 writers of 2 GiB, `off` and
# `auto`, busy then idle.
set -u
. scripts/device-setup.sh new prio
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); v=/dev/shm/p23
mw() { # BIN WRITERS GPU LABEL
  local bin=$1 n=$2 g=$3; rm -rf $v; mkdir -p $v/b $v/s $v/m
  /tmp/b/$bin mount $v/b $v/m --gpu $g --staging-dir $v/s > $v/log 2>&1 &
  local pid=$!; for _ in $(seq 100); do grep -q " $v/m fuse" /proc/mounts && break; sleep 0.1; done; sleep 2
  local c0 t0 t1 c1 dds=() i
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do timeout 60 dd if=/dev/shm/real.2g of=$v/m/f$i bs=1M conv=fsync status=none & dds+=($!); done; wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat); umount $v/m; wait $pid
  awk -v b=$bin -v g=$g -v l="$4" -v n=$((size * n)) -v w=$n -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck \
    'BEGIN { printf "%-4s %-4s w%d %-5s %6.2f GB/s %5.2f CPU-s/GiB\n", b, g, w, l, n/(t1-t0)/1e9, c/tk/(n/1073741824) }'
}
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores; $(cat .devab/REV)"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  for r in 1 2; do for n in 4 8; do
    mw new $n off busy; mw prio $n off busy; mw new $n auto busy; mw prio $n auto busy
  done; done
  kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
  for n in 4 8; do mw new $n off idle; mw prio $n off idle; mw new $n auto idle; mw prio $n auto idle; done
  rm -rf $v
} > $OUT/s23e.txt 2>&1
cat $OUT/s23e.txt
