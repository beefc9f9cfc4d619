#!/bin/bash
# Experiment on the GPU host, under $OUT: `--gpu auto` of a build (.devab/NEW.gz, NEW the first
# argument) against c0c625e (.devab/c0c625e.gz): 8 zstd-1 writers of 512 MiB through warmed
# mounts, idle and with 16 busy loops; `pack` of 4 GiB of real files, --gpu auto and off, idle
# and busy. As run for BENCHMARKS.md §5 round 6: NEW = margin1 (launch margin 1), cold (479994c).
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
mkdir -p /tmp/b; new=$1; for v in c0c625e $new; do gunzip -c .devab/$v.gz > /tmp/b/$v; chmod +x /tmp/b/$v; done
[ -f /dev/shm/real.2g ] || tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
cat /dev/shm/real.2g /dev/shm/real.2g > /dev/shm/usr4g
T="/usr/bin/time -f wall=%e,user=%U,sys=%S"
p() { rm -f /dev/shm/out.skf; echo "pack $1 --gpu $2: $( { $T /tmp/b/$1 pack --gpu $2 /dev/shm/usr4g /dev/shm/out.skf; } 2>&1 | tail -1) stored=$(stat -c %s /dev/shm/out.skf)"; }
export AB_VARIANTS="old new" AB_WARM=1
for load in idle busy; do
  if [ $load = busy ]; then for i in $(seq 16); do ( while :; do :; done ) & done; sleep 1; fi
  echo "== $load: 8 writers, --gpu auto (old = c0c625e, new = $new)"
  AB_GPU=auto scripts/ab-write.sh /tmp/b/c0c625e /tmp/b/$new /dev/shm/real.512m 2 zstd 8 | grep -v "^#"
  echo "== $load: 8 writers, --gpu off"
  AB_VARIANTS=old AB_GPU=off scripts/ab-write.sh /tmp/b/c0c625e /tmp/b/c0c625e /dev/shm/real.512m 2 zstd 8 | grep -v "^#"
  echo "== $load: pack"
  for rep in 1 2; do for v in c0c625e $new; do p $v auto; done; p c0c625e off; done
  if [ $load = busy ]; then kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; fi
done
