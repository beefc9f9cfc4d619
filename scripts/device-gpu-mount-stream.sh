#!/bin/bash
# Experiment on the GPU host, under $OUT: mounts whose dispatcher runs as `pack`'s does
# (`DispatchConfig::one_stream`: two launches at once, each gathering 128 frames), .devab/mstream.gz,
# against the default (.devab/final.gz): 4 and 8 zstd-1 writers of 512 MiB, --gpu off/auto/on,
# mounts warmed by 256 MiB first.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
mkdir -p /tmp/b; for v in final mstream; do gunzip -c .devab/$v.gz > /tmp/b/$v; chmod +x /tmp/b/$v; done
[ -f /dev/shm/real.2g ] || tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
export AB_VARIANTS="old new" AB_WARM=1
for w in 4 8; do for g in off auto on; do
  echo "== --gpu $g (old = default dispatcher, new = one stream)"
  AB_GPU=$g scripts/ab-write.sh /tmp/b/final /tmp/b/mstream /dev/shm/real.512m 2 zstd $w | grep -v "^#"
done; done
