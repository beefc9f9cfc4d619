#!/bin/bash
# Session 20, second call on the GPU host, under $OUT: issue 15's end-to-end bench
# (scripts/gpu-e2e.sh: pack, 8 writers, 8 cold readers; idle and with 16 busy loops; --gpu off
# and auto) on the build before the one ordered encode pipeline (.devab/old.gz) and on it
# (.devab/new.gz), one after the other on the same machine.
set -u
. scripts/device-setup.sh old new
for b in old new; do
  echo "== $b"
  timeout 270 scripts/gpu-e2e.sh /tmp/b/$b /dev/shm/real.2g 1 "off auto" "8" 16 2>&1
done > $OUT/gpu-e2e-ab.txt
cat $OUT/gpu-e2e-ab.txt
