#!/bin/bash
# Session 20, third call on the GPU host, under $OUT: frames cut or read into the GPU's
# page-locked buffers (.devab/new.gz, at e236433). The GPU tests (with the new one for lent
# buffers) and round trips; `pack` of 2 GiB of real files, --gpu on/auto/off, for the build
# before this session (old), the new build with its pool off (SHRINKFS_GPU_FRAME_BUFFERS=0,
# "nobuf") and on (new), rotated, 2 rounds; then issue 15's end-to-end bench (8 writers and
# readers, idle and with 16 busy loops, --gpu off/auto/on) for nobuf and new on the same machine.
set -u
. scripts/device-setup.sh old new gputest gpumetrics
printf '#!/bin/sh\nSHRINKFS_GPU_FRAME_BUFFERS=0 exec /tmp/b/new "$@"\n' > /tmp/b/nobuf; chmod +x /tmp/b/nobuf
bash scripts/device-final-check.sh > /dev/null
{ echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -5; } >> $OUT/final-check.txt
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores; pack of /dev/shm/real.2g"
  for r in 1 2; do for g in on auto off; do for b in old nobuf new; do
    /usr/bin/time -f "%e %U %S" -o /tmp/t /tmp/b/$b pack --gpu $g /dev/shm/real.2g /dev/shm/p.$b 2>/dev/null
    read -r e u s < /tmp/t
    printf "pack %-5s gpu=%-4s run%d  %5.2f s  user %5.2f sys %5.2f  stored %d\n" $b $g $r $e $u $s "$(stat -c %s /dev/shm/p.$b)"
  done; done; done
  /tmp/b/old unpack /dev/shm/p.new /dev/shm/p.out 2>/dev/null && cmp /dev/shm/real.2g /dev/shm/p.out && echo "NEW_PACK_UNPACKED_BY_OLD_OK"
  rm -f /dev/shm/p.old /dev/shm/p.nobuf /dev/shm/p.new /dev/shm/p.out
} > $OUT/pack-ab.txt 2>&1
for b in nobuf new; do
  echo "== $b"
  timeout 200 scripts/gpu-e2e.sh /tmp/b/$b /dev/shm/real.2g 1 "off auto on" "8" 16 2>&1
done > $OUT/gpu-e2e-ab.txt
cat $OUT/final-check.txt $OUT/pack-ab.txt $OUT/gpu-e2e-ab.txt
