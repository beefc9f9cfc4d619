#!/bin/bash
# Session 27, probe: issue 15's busy mount lines (4 and 8 writers of 2 GiB of a tar of /usr,
# `dd bs=1M conv=fsync`, 16 CPU-bound loops beside) with the mount's FUSE request threads
# (`fuser-*`), or those and its tokio threads, reniced to -10 from outside once the mount is up,
# against the mount as it is; `--gpu auto` and `off`. The build is .devab/new.gz (.devab/REV).
set -u
. scripts/device-setup.sh new
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p27
mw() { # BIN LABEL WRITERS GPU RENICE(none|fuser|fuser+tokio)
  local bin=$1 label=$2 n=$3 g=$4 rn=$5
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/$bin mount $w/b $w/m --gpu $g --staging-dir $w/s --metrics-addr 127.0.0.1:0 > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2
  local t pat
  case $rn in fuser) pat='^fuser-' ;; fuser+tokio) pat='^(fuser-|tokio-rt)' ;; *) pat='^$' ;; esac
  for t in /proc/$pid/task/*; do grep -Eq "$pat" $t/comm && renice -n -10 -p ${t##*/} > /dev/null; done
  local c0 t0 t1 c1 dds=() i
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do timeout 60 dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  umount $w/m; wait $pid
  awk -v l="$label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck \
    'BEGIN { gib = n / 1073741824; printf "%-28s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB\n", l, t1-t0, n/(t1-t0)/1e9, c/tk/gib }'
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(head -1 .devab/REV); 2 GiB of a tar of /usr per writer; 16 busy loops"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  for r in 1 2; do for n in 4 8; do
    for g in off auto; do for rn in none fuser fuser+tokio; do mw new "$g w$n $rn" $n $g $rn; done; done
  done; done
  kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
} > $OUT/s27b-renice.txt 2>&1
cat $OUT/machine.txt $OUT/s27b-renice.txt
