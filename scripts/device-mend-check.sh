#!/bin/bash
# Check on the GPU host, under $OUT: the late review mend (.devab/mend.gz) against c0c625e
# (.devab/c0c625e.gz): `pack` of 4 GiB of real files --gpu on/auto/off, then 8 zstd-1 writers of
# 512 MiB through warmed mounts, --gpu on and auto, alternated.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
mkdir -p /tmp/b; for v in c0c625e mend; do gunzip -c .devab/$v.gz > /tmp/b/$v; chmod +x /tmp/b/$v; done
[ -f /dev/shm/real.2g ] || tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
cat /dev/shm/real.2g /dev/shm/real.2g > /dev/shm/usr4g
T="/usr/bin/time -f wall=%e,user=%U,sys=%S"
p() { rm -f /dev/shm/out.skf; echo "pack $1 --gpu $2: $( { $T /tmp/b/$1 pack --gpu $2 /dev/shm/usr4g /dev/shm/out.skf; } 2>&1 | tail -1) stored=$(stat -c %s /dev/shm/out.skf)"; }
for rep in 1 2; do for g in on auto off; do for v in c0c625e mend; do p $v $g; done; done; done
rm -f /dev/shm/usr4g /dev/shm/out.skf
export AB_VARIANTS="old new" AB_WARM=1
for g in on auto; do
  echo "== 8 writers, --gpu $g (old = c0c625e, new = mend)"
  AB_GPU=$g scripts/ab-write.sh /tmp/b/c0c625e /tmp/b/mend /dev/shm/real.512m 2 zstd 8 | grep -v "^#"
done
