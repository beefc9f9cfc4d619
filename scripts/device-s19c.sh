#!/bin/bash
# Session 19, third call on the GPU host, under $OUT: the GPU layer with one method per nVCOMP call
# and a typed batch layout (.devab/new.gz, tests .devab/gputest.gz and .devab/gpumetrics.gz):
# the GPU tests, a GPU round trip (pack --gpu on unpacked on the CPU; a --gpu on mount read back
# with GPU and CPU decoding), `bench codecs` GPU rows against the build before (.devab/old.gz),
# alternated, and issue 15's end-to-end bench (scripts/gpu-e2e.sh) on the new build.
set -u
. scripts/device-setup.sh old new gputest gpumetrics
{
  echo "== codec/tests/gpu.rs"; timeout 120 /tmp/b/gputest --include-ignored 2>&1 | tail -9
  echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -5
  /tmp/b/new pack --gpu on /dev/shm/real.2g /dev/shm/p.skf && /tmp/b/new unpack /dev/shm/p.skf /dev/shm/p.out \
    && cmp /dev/shm/real.2g /dev/shm/p.out && echo "ROUNDTRIP_OK (2 GiB, pack --gpu on, CPU unpack)"
  rm -f /dev/shm/p.skf /dev/shm/p.out
  w=/dev/shm/fc; rm -rf $w; mkdir -p $w/b $w/m
  /tmp/b/new mount $w/b $w/m --gpu on --daemon
  for i in 1 2 3 4; do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & done; wait
  umount $w/m; echo 3 > /proc/sys/vm/drop_caches
  for g in on off; do
    /tmp/b/new mount $w/b $w/m --gpu $g --daemon
    ok=1; for i in 1 2 3 4; do cmp /dev/shm/real.512m $w/m/f$i || ok=0; done
    echo "MOUNT_READBACK gpu-write=on read-gpu=$g ok=$ok"
    umount $w/m; echo 3 > /proc/sys/vm/drop_caches
  done
  rm -rf $w
} > $OUT/gpu-check.txt 2>&1
for r in 1 2; do for b in old new; do
  echo "== $b run $r"
  timeout 60 /tmp/b/$b bench codecs --corpora logs --input /dev/shm/real.2g --size 1G --frame-sizes 1M --codecs zstd --runs 2 2>&1 | grep -E "gpu|cpu-zstd-1|cores"
done; done > $OUT/bench-codecs-ab.txt
timeout 300 scripts/gpu-e2e.sh /tmp/b/new /dev/shm/real.2g 1 "off auto" "4 8" 16 > $OUT/gpu-e2e.txt 2>&1
cat $OUT/gpu-check.txt
