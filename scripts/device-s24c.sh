#!/bin/bash
# Session 24's last device call: the final check of the session's head (.devab/new.gz, 597a08b:
# the data-safety fixes; GPU tests .devab/gputest.gz and .devab/gpumetrics.gz), then issue 14's
# write and read lines, session 19's last build (.devab/old.gz, a10593d) against the head,
# alternated: one writer of 2 GiB (`--codec none` and zstd-1) and eight of 512 MiB (zstd-1).
set -u
. scripts/device-setup.sh new old gputest gpumetrics
bash scripts/device-final-check.sh > /dev/null
{ echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -4; } >> $OUT/final-check.txt
cat $OUT/final-check.txt
{
  bash scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.2g 3 "none zstd" 1
  bash scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.512m 3 "zstd" 8
} > $OUT/s24c-ab.txt 2>&1
cat $OUT/s24c-ab.txt
