#!/bin/bash
# Session 20, first call on the GPU host, under $OUT: the one ordered encode pipeline
# (.devab/new.gz) against the build before it (.devab/old.gz). The GPU tests and round trips
# (scripts/device-final-check.sh), the metrics test, then `pack` of 2 GiB of real files under
# --gpu on, auto and off, old and new alternated, 2 rounds, stored bytes and identity checked.
set -u
. scripts/device-setup.sh old new gputest gpumetrics
bash scripts/device-final-check.sh > /dev/null
{ echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -5; } >> $OUT/final-check.txt
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores; pack of /dev/shm/real.2g, old then new, each policy"
  for r in 1 2; do for g in on auto off; do for b in old new; do
    /usr/bin/time -f "%e %U %S" -o /tmp/t /tmp/b/$b pack --gpu $g /dev/shm/real.2g /dev/shm/p.$b 2>/dev/null
    read -r e u s < /tmp/t
    printf "pack %-3s gpu=%-4s run%d  %5.2f s  user %5.2f sys %5.2f  stored %d\n" $b $g $r $e $u $s "$(stat -c %s /dev/shm/p.$b)"
  done; done; done
  /tmp/b/old unpack /dev/shm/p.new /dev/shm/p.out 2>/dev/null && cmp /dev/shm/real.2g /dev/shm/p.out && echo "NEW_PACK_UNPACKED_BY_OLD_OK"
  rm -f /dev/shm/p.old /dev/shm/p.new /dev/shm/p.out
} > $OUT/pack-ab.txt 2>&1
cat $OUT/final-check.txt $OUT/pack-ab.txt
