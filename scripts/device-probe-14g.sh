#!/bin/bash
# Two probes on the GPU host, under $OUT: (1) readers that go around the page cache (.devab/rdio.gz,
# an experiment build) against the default (.devab/new.gz), 1 and 8 cold readers; (2) --gpu auto
# against off on mounts that wrote 256 MiB before the timed writes (AB_WARM), 4 and 8 zstd writers.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
mkdir -p /tmp/b; for v in new rdio; do gunzip -c .devab/$v.gz > /tmp/b/$v; chmod +x /tmp/b/$v; done
[ -f /dev/shm/real.2g ] || tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
export AB_VARIANTS="old new"
scripts/ab-write.sh /tmp/b/new /tmp/b/rdio /dev/shm/real.2g 2 "none zstd" 1 2>&1 | tee $OUT/rdio-1.txt
scripts/ab-write.sh /tmp/b/new /tmp/b/rdio /dev/shm/real.512m 2 "none zstd" 8 2>&1 | tee $OUT/rdio-8.txt
export AB_VARIANTS=new AB_WARM=1
for w in 4 8; do for rep in 1 2; do for g in off auto; do
  echo "== warm, --gpu $g"
  AB_GPU=$g scripts/ab-write.sh /tmp/b/new /tmp/b/new /dev/shm/real.512m 1 zstd $w | grep -v "^#"
done; done; done 2>&1 | tee $OUT/auto-warm.txt
