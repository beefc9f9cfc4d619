#!/bin/bash
# Session 20, fifth call on the GPU host, under $OUT: issue 15's end-to-end bench
# (scripts/gpu-e2e.sh: pack; 4 and 8 writers and readers; idle and with 16 busy loops;
# --gpu off, auto and on) for the mount's page-locked frame buffers off
# (SHRINKFS_GPU_FRAME_BUFFERS=0, "fb0") and at the default (1024, "new"), .devab/new.gz at
# 0d7288b, in the order ORDER (default "fb0 new").
set -u
. scripts/device-setup.sh new
printf '#!/bin/sh\nSHRINKFS_GPU_FRAME_BUFFERS=0 exec /tmp/b/new "$@"\n' > /tmp/b/fb0; chmod +x /tmp/b/fb0
for b in ${ORDER:-fb0 new}; do
  echo "== $b"
  timeout 285 scripts/gpu-e2e.sh /tmp/b/$b /dev/shm/real.2g 1 "off auto on" "4 8" 16 2>&1
done > $OUT/gpu-e2e.txt
cat $OUT/gpu-e2e.txt
