#!/bin/bash
# Session 19, third call on the GPU host, under $OUT: the GPU layer with one method per nVCOMP call
# and a typed batch layout (.devab/new.gz, tests .devab/gputest.gz and .devab/gpumetrics.gz):
# the GPU tests, a GPU round trip (pack --gpu on unpacked on the CPU; a --gpu on mount read back
# with GPU and CPU decoding), `bench codecs` GPU rows against the build before (.devab/old.gz),
# alternated, and issue 15's end-to-end bench (scripts/gpu-e2e.sh) on the new build.
set -u
. scripts/device-setup.sh old new gputest gpumetrics
# The GPU tests and both round trips (scripts/device-final-check.sh, into $OUT/final-check.txt),
# then the metrics test.
bash scripts/device-final-check.sh > /dev/null
{ echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -5; } >> $OUT/final-check.txt
for r in 1 2; do for b in old new; do
  echo "== $b run $r"
  timeout 60 /tmp/b/$b bench codecs --corpora logs --input /dev/shm/real.2g --size 1G --frame-sizes 1M --codecs zstd --runs 2 2>&1 | grep -E "gpu|cpu-zstd-1|cores"
done; done > $OUT/bench-codecs-ab.txt
timeout 300 scripts/gpu-e2e.sh /tmp/b/new /dev/shm/real.2g 1 "off auto" "4 8" 16 > $OUT/gpu-e2e.txt 2>&1
cat $OUT/final-check.txt
