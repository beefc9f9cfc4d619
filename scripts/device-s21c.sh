#!/bin/bash
# Session 21, third call: old (d4be039) against new (frame buffers registered at the GPU's start
# on mounts; the frames a file's writer finds ready written in one append), alternated, two idle
# rounds of 1, 4 and 8 writers of 2 GiB of a tar of /usr each (`dd bs=1M conv=fsync`), `--gpu
# off/on/auto`; new with SHRINKFS_GPU_FRAME_BUFFERS_AT_START=0 splits the two changes. Then one
# round with 16 CPU-bound loops beside.
set -u
. scripts/device-setup.sh old new
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p21
mw() { # BIN LABEL WRITERS GPU; env from the caller
  local bin=$1 label=$2 n=$3 g=$4
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/$bin mount $w/b $w/m --gpu $g --staging-dir $w/s --metrics-addr 127.0.0.1:0 > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2 # the GPU's start and warm-up out of the way
  local c0 t0 t1 c1 dds=() i
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  local share; share=$(/tmp/b/$bin stats $w/m --once --json --interval 0.1 2>/dev/null | grep -o '"gpu_share":[0-9.e-]*' | cut -d: -f2)
  umount $w/m; wait $pid
  awk -v b=$bin -v l="$label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck -v sh="${share:-0}" \
    'BEGIN { gib = n / 1073741824; printf "%-4s %-22s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB share %.2f\n", b, l, t1-t0, n/(t1-t0)/1e9, c/tk/gib, sh }'
}
hogs=()
idle_round() {
  for n in 4 8; do for g in off on auto; do for b in old new; do mw $b "$g w$n" $n $g; done; done
    SHRINKFS_GPU_FRAME_BUFFERS_AT_START=0 mw new "on w$n at-start=0" $n on
  done
  for b in old new; do mw $b "off w1" 1 off; done
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; old d4be039, new $(cat .devab/REV); 2 GiB of a tar of /usr per writer"
  echo "## idle round 1"; idle_round
  echo "## idle round 2"; idle_round
  echo "## busy: 16 CPU-bound loops beside"
  for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  for n in 8 4; do for g in off on auto; do for b in new old; do mw $b "$g w$n busy" $n $g; done; done; done
  kill "${hogs[@]}"
} > $OUT/s21c.txt 2>&1
cat $OUT/s21c.txt
