#!/bin/bash
# Final check on the GPU host, under $OUT: the GPU tests (.devab/gputest.gz, codec/tests/gpu.rs of
# the final build, run with --include-ignored), a 2 GiB `pack --gpu on` of real files unpacked
# on the CPU and compared, and 4 writers of 512 MiB through a `--gpu on` mount read back (GPU
# decode, then a `--gpu off` mount) and compared (.devab/new.gz).
set -u
. scripts/device-setup.sh new gputest
{ echo "== GPU tests"; /tmp/b/gputest --include-ignored 2>&1 | tail -8; } > $OUT/final-check.txt
{
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
} >> $OUT/final-check.txt 2>&1
cat $OUT/final-check.txt
