#!/bin/bash
# Session 20, fourth call on the GPU host, under $OUT: launches that copy the lent chunks
# directly and stage the rest (.devab/new.gz, the commit after e236433). The GPU tests; one
# `pack --gpu on` with the launches' timings logged (stage_us: the host's staging time); `pack`
# of 2 GiB of real files under --gpu on and auto with the page-locked pool at 0 (off), 256 (the
# default) and 1024 frame buffers (SHRINKFS_GPU_FRAME_BUFFERS), rotated, 3 rounds; then the
# end-to-end bench (8 writers and readers, idle and busy, --gpu auto and on) for 0 and 1024.
set -u
. scripts/device-setup.sh new gputest
for n in 0 256 1024; do printf '#!/bin/sh\nSHRINKFS_GPU_FRAME_BUFFERS=%s exec /tmp/b/new "$@"\n' $n > /tmp/b/fb$n; chmod +x /tmp/b/fb$n; done
{ echo "== GPU tests"; /tmp/b/gputest --include-ignored 2>&1 | grep -E "^test |test result|panicked|did not|differ" ; } > $OUT/gpu-tests.txt
for n in 0 256 1024; do
  echo "== frame buffers $n: stage_us of the launches"
  RUST_LOG=shrinkfs_codec=debug /tmp/b/fb$n pack --gpu on /dev/shm/real.2g /dev/shm/p.x 2>&1 | grep -o "chunks=[0-9]* bytes=[0-9]* setup_us=[0-9]* stage_us=[0-9]*" | sort | uniq -c | sort -rn | head -6
done > $OUT/stage-times.txt 2>&1
rm -f /dev/shm/p.x
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores; pack of /dev/shm/real.2g; fbN = N page-locked frame buffers"
  for r in 1 2 3; do for g in on auto; do for b in fb0 fb256 fb1024; do
    /usr/bin/time -f "%e %U %S" -o /tmp/t /tmp/b/$b pack --gpu $g /dev/shm/real.2g /dev/shm/p.$b 2>/dev/null
    read -r e u s < /tmp/t
    printf "pack %-6s gpu=%-4s run%d  %5.2f s  user %5.2f sys %5.2f  stored %d\n" $b $g $r $e $u $s "$(stat -c %s /dev/shm/p.$b)"
  done; done; done
  /tmp/b/fb0 unpack /dev/shm/p.fb1024 /dev/shm/p.out 2>/dev/null && cmp /dev/shm/real.2g /dev/shm/p.out && echo "FB1024_PACK_UNPACKED_OK"
  rm -f /dev/shm/p.*
} > $OUT/pack-fb.txt 2>&1
for b in fb0 fb1024; do
  echo "== $b"
  timeout 150 scripts/gpu-e2e.sh /tmp/b/$b /dev/shm/real.2g 1 "auto on" "8" 16 2>&1 | grep -v "^pack"
done > $OUT/gpu-e2e-fb.txt
cat $OUT/gpu-tests.txt $OUT/stage-times.txt $OUT/pack-fb.txt $OUT/gpu-e2e-fb.txt
