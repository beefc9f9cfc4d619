#!/bin/bash
# Session 22: reads' batches decoded where measured faster under `--gpu auto` (new) against
# c490aa1 (base, where `auto` decodes on the cores). Run twice: first (ROUNDS=2) with a build that
# also fetched ahead in batches of 8 frames where the GPU may decode them (not kept), then
# (ROUNDS=1, then ROUNDS=2 SKIP_CHECK=1) with the final build, be36303:
# the final check (GPU tests, round trips) of new, then cold reads through a fresh mount (1 reader
# of 2 GiB, 8 readers of 512 MiB of a tar of /usr, zstd-1 written once by base `--gpu off`),
# idle and beside 16 CPU-bound loops, with the mount's CPU-s per GiB and frames decoded on the GPU.
set -u
. scripts/device-setup.sh base new gputest gpumetrics
if [ "${SKIP_CHECK:-0}" != 1 ]; then
  bash scripts/device-final-check.sh > /dev/null
  { echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -4; } >> $OUT/final-check.txt
fi
w=/dev/shm/cold; rm -rf $w; mkdir -p $w/b $w/m $w/s
/tmp/b/base mount $w/b $w/m --gpu off --staging-dir $w/s --daemon
for i in $(seq 8); do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & done; wait
dd if=/dev/shm/real.2g of=$w/m/big bs=1M conv=fsync status=none
umount $w/m
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
cold() { # BIN GPU READERS LABEL
  local b=$1 g=$2 n=$3 label=$4
  sync; echo 3 > /proc/sys/vm/drop_caches
  /tmp/b/$b mount $w/b $w/m --gpu $g --staging-dir $w/s --metrics-addr 127.0.0.1:0 > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2
  local c0 s e c1 dds=() i
  c0=$(ticks $pid); s=$(date +%s.%N)
  if [ $n = 1 ]; then timeout 60 dd if=$w/m/big of=/dev/null bs=1M status=none
  else for i in $(seq 8); do timeout 60 dd if=$w/m/f$i of=/dev/null bs=1M status=none & dds+=($!); done; wait "${dds[@]}"; fi
  e=$(date +%s.%N); c1=$(ticks $pid)
  local dec; dec=$(python3 -c "
import os, urllib.request
a = os.getxattr('$w/m', 'user.shrinkfs.metrics_addr').decode()
t = urllib.request.urlopen('http://' + a + '/metrics').read().decode()
print(sum(float(l.split()[-1]) for l in t.splitlines() if l.startswith('shrinkfs_gpu_decoded_frames_total')))" 2>/dev/null)
  umount $w/m; wait $pid 2>/dev/null
  awk -v l="$label" -v s=$s -v e=$e -v c=$((c1 - c0)) -v g=$([ $n = 1 ] && echo 2 || echo 4) -v d="${dec:-?}" \
    'BEGIN{printf "%-22s %.2f GB/s %.2f CPU-s/GiB gpu-decoded %s\n", l, g*2^30/(e-s)/1e9, c/100/g, d}'
}
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores; $(cat .devab/REV)"
  for rep in $(seq ${ROUNDS:-2}); do
    for n in 1 8; do
      cold base off $n "base off r$n"; cold base auto $n "base auto r$n"; cold new auto $n "new auto r$n"; cold new off $n "new off r$n"; cold new on $n "new on r$n"
    done
  done
  echo "## 16 CPU-bound loops beside"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  for n in 1 8; do cold base auto $n "base auto r$n busy"; cold new auto $n "new auto r$n busy"; cold new off $n "new off r$n busy"; cold new on $n "new on r$n busy"; done
  kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
} > $OUT/s22e.txt 2>&1
cat $OUT/final-check.txt $OUT/s22e.txt 2>/dev/null
