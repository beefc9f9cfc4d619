#!/bin/bash
# Session 27: the request threads at `--request-nice -10` (.devab/new.gz) against the build
# before (.devab/old.gz; see .devab/REV), alternated: issue 15's mount lines (4 and 8 writers of
# 2 GiB of a tar of /usr, `dd bs=1M conv=fsync`, `--gpu off` and `auto`), beside 16 CPU-bound
# loops (S27C_BUSY=1, two rounds; S27C_ROUNDS, S27C_N and S27C_BINS narrow them) or idle (one round, then one writer of 2 GiB with
# `--codec none` and zstd-1 through scripts/ab-write.sh, two runs).
set -u
. scripts/device-setup.sh new old
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p27
mw() { # BIN LABEL WRITERS GPU
  local bin=$1 label=$2 n=$3 g=$4
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/$bin mount $w/b $w/m --gpu $g --staging-dir $w/s > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2
  local c0 t0 t1 c1 dds=() i
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do timeout 60 dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  umount $w/m; wait $pid
  awk -v l="$bin $label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck \
    'BEGIN { gib = n / 1073741824; printf "%-24s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB\n", l, t1-t0, n/(t1-t0)/1e9, c/tk/gib }'
}
if [ "${S27C_BUSY:-0}" = 1 ]; then
  {
    echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV); 16 busy loops"
    hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
    for r in ${S27C_ROUNDS:-1 2}; do for n in ${S27C_N:-4 8}; do for g in off auto; do for b in ${S27C_BINS:-old new}; do mw $b "$g w$n busy" $n $g; done; done; done; done
    kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
  } > $OUT/s27c-busy.txt 2>&1
  cat $OUT/machine.txt $OUT/s27c-busy.txt
else
  {
    echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV); idle"
    for n in 4 8; do for g in off auto; do for b in old new; do mw $b "$g w$n" $n $g; done; done; done
    bash scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.2g 2 "none zstd" 1
  } > $OUT/s27c-idle.txt 2>&1
  cat $OUT/machine.txt $OUT/s27c-idle.txt
fi
