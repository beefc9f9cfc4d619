#!/bin/bash
# Session 22, last call (little device time left): the final build (.devab/new.gz, with its GPU
# tests): the five GPU tests, tests/gpu_metrics.rs, four 512 MiB files written through a
# `--gpu on` mount read back through `--gpu on`, `off` and `auto` mounts; then cold reads of 8
# readers beside 16 CPU-bound loops, `auto` against `off`, alternated (the case where the try of
# the GPU, decoded for real, had cost `auto` 6-7%).
set -u
. scripts/device-setup.sh new gputest gpumetrics
{
  echo "== GPU tests"; timeout 60 /tmp/b/gputest --include-ignored 2>&1 | tail -3
  echo "== tests/gpu_metrics.rs"; timeout 60 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -3
  w=/dev/shm/fc; rm -rf $w; mkdir -p $w/b $w/m
  /tmp/b/new mount $w/b $w/m --gpu on --daemon
  for i in 1 2 3 4; do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & done; wait
  umount $w/m; echo 3 > /proc/sys/vm/drop_caches
  for g in on off auto; do
    /tmp/b/new mount $w/b $w/m --gpu $g --daemon; sleep 1
    ok=1; for i in 1 2 3 4; do cmp /dev/shm/real.512m $w/m/f$i || ok=0; done
    echo "MOUNT_READBACK gpu-write=on read-gpu=$g ok=$ok"
    umount $w/m; echo 3 > /proc/sys/vm/drop_caches
  done
  rm -rf $w
} > $OUT/final-check.txt 2>&1
cat $OUT/final-check.txt
w=/dev/shm/cold; rm -rf $w; mkdir -p $w/b $w/m $w/s
/tmp/b/new mount $w/b $w/m --gpu off --staging-dir $w/s --daemon
for i in $(seq 8); do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & done; wait
umount $w/m
hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
for g in auto off auto off; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  /tmp/b/new mount $w/b $w/m --gpu $g --staging-dir $w/s --daemon; sleep 2
  s=$(date +%s.%N); dds=(); for i in $(seq 8); do timeout 60 dd if=$w/m/f$i of=/dev/null bs=1M status=none & dds+=($!); done; wait "${dds[@]}"; e=$(date +%s.%N)
  umount $w/m
  echo "new $g r8 busy $(awk -v s=$s -v e=$e 'BEGIN{printf "%.2f GB/s", 4*2^30/(e-s)/1e9}')"
done | tee $OUT/cold-busy.txt
kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
