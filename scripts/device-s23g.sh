#!/bin/bash
# Session 23: the GPU's decode of a read's batch against the cores, by batch size and by how the
# frames were cut (one zstd frame per 1 MiB frame, as the cores write; 64 KiB zstd frames, as the
# GPU writes): codec/examples/gpu_decode_batches.rs (.devab/gpudecode.gz) on 256 MiB of a tar of
# /usr, twice.
set -u
. scripts/device-setup.sh gpudecode
for r in 1 2; do echo "== run $r"; timeout 200 /tmp/b/gpudecode /dev/shm/real.2g 256; done > $OUT/s23g.txt 2>&1
cat $OUT/s23g.txt
