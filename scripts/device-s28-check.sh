#!/bin/bash
# Session 28: the check of the session's code on a GPU host (.devab/new.gz, see .devab/REV): the
# GPU tests (.devab/gputest.gz), tests/gpu_metrics.rs (.devab/gpumetrics.gz), a 2 GiB
# `pack --gpu on` unpacked on the CPU, and a `--gpu on` mount read back with GPU and CPU decoding
# (scripts/device-final-check.sh).
set -u
. scripts/device-setup.sh new gputest gpumetrics
bash scripts/device-final-check.sh > /dev/null
{ echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -4; } >> $OUT/final-check.txt
cat .devab/REV >> $OUT/final-check.txt
cat $OUT/final-check.txt
