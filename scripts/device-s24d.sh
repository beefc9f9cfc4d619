#!/bin/bash
# Session 24: the final check of the session's last code (.devab/new.gz, 6cbcc64: names as keys,
# opens beside older handles, a GPU batch's pieces checked without overflow), with the GPU tests
# (.devab/gputest.gz) and gpu_metrics (.devab/gpumetrics.gz).
set -u
. scripts/device-setup.sh new gputest gpumetrics
bash scripts/device-final-check.sh > /dev/null
{ echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -4; } >> $OUT/final-check.txt
cat $OUT/final-check.txt
