#!/bin/bash
# Session 25: the final check of the session's code (.devab/new.gz, 20fa714: listings kept for
# --listing-ttl, per-version local times, a writer's open beside readers renewed), with the GPU
# tests (.devab/gputest.gz; the codec is unchanged since ed56ffa) and gpu_metrics
# (.devab/gpumetrics.gz, built at 20fa714).
set -u
. scripts/device-setup.sh new gputest gpumetrics
bash scripts/device-final-check.sh > /dev/null
{ echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -4; } >> $OUT/final-check.txt
cat $OUT/final-check.txt
