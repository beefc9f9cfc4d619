#!/bin/bash
# Issue 15's mount rows on the GPU host: W writers of 512 MiB of real files each (zstd-1), the
# mount's --gpu off, auto and on alternated, idle and with 16 CPU-bound loops beside.
# Expects .devab/new.gz (a stripped release build) and nVCOMP in .device/lib; writes under $OUT.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
mkdir -p /tmp/b; gunzip -c .devab/new.gz > /tmp/b/new; chmod +x /tmp/b/new
[ -f /dev/shm/real.2g ] || tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
export AB_VARIANTS=new
for load in idle busy; do
  if [ $load = busy ]; then for i in $(seq 16); do ( while :; do :; done ) & done; sleep 1; fi
  for w in 4 8; do for rep in 1 2; do for g in off auto on; do
    echo "== $load, --gpu $g"
    AB_GPU=$g scripts/ab-write.sh /tmp/b/new /tmp/b/new /dev/shm/real.512m 1 zstd $w | grep -v "^#"
  done; done; done
  if [ $load = busy ]; then kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; fi
done
