#!/bin/bash
# Session 26: the check of the session's code on a GPU host (.devab/new.gz, see .devab/REV: lookups
# beside readers of a file replaced elsewhere, fallocate, directory times), with the GPU tests
# (.devab/gputest.gz; the codec is unchanged since ed56ffa) and gpu_metrics (.devab/gpumetrics.gz,
# built with .devab/new.gz).
set -u
. scripts/device-setup.sh new gputest gpumetrics
bash scripts/device-final-check.sh > /dev/null
{ echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -4; } >> $OUT/final-check.txt
cat .devab/REV >> $OUT/final-check.txt
cat $OUT/final-check.txt
