#!/bin/bash
# Run on the GPU host from the repository root with .device/ prepared (shared/gpu/README.md). pack wall time, old (GPU probed before the first frame) vs new (GPU started in the background),
# --gpu auto and off, real files (a tar of /usr), interleaved runs.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
mkdir -p /tmp/b; gunzip -c .device/bin/shrinkfs.gz > /tmp/b/new; gunzip -c .device/bin/shrinkfs-old.gz > /tmp/b/old; chmod +x /tmp/b/*
[ -f /dev/shm/usr2g ] || tar cf - /usr 2>/dev/null | head -c 2G > /dev/shm/usr2g; head -c 512M /dev/shm/usr2g > /dev/shm/usr512m
ls -la /dev/shm/usr2g /dev/shm/usr512m; nvidia-smi --query-gpu=name --format=csv,noheader; nproc
for f in usr512m usr2g; do
  for rep in 1 2 3; do
    for v in old new; do
      for g in auto off; do
        s=$(date +%s.%N); /tmp/b/$v pack --gpu $g /dev/shm/$f /dev/shm/out.skf 2>/dev/null; e=$(date +%s.%N)
        echo "$f rep$rep $v $g $(awk "BEGIN{printf \"%.3f\", $e - $s}") s $(stat -c %s /dev/shm/out.skf)"
      done
    done
  done
done
/tmp/b/new pack --gpu auto /dev/shm/usr2g /dev/shm/out.skf && /tmp/b/new unpack /dev/shm/out.skf /dev/shm/back && cmp /dev/shm/usr2g /dev/shm/back && echo ROUNDTRIP_OK
RUST_LOG=shrinkfs_codec=info /tmp/b/new pack --gpu auto /dev/shm/usr512m /dev/shm/out.skf 2>&1 | tail -3
