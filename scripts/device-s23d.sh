#!/bin/bash
# Session 23: `bench codecs` GPU rows, three builds in rotation, three rounds: base (841c73b), new
# (device and page-locked buffers and events on cudarc's safe types; its events keep timing, since
# cudarc's cannot combine blocking sync with no timing) and new2 (new with the events raw, blocking
# sync and no timing, as in base). 1 GiB of a tar of /usr and the logs corpus, 1 MiB frames, zstd.
set -u
. scripts/device-setup.sh base new new2
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores; base 841c73b; new, new2 as above"
  order=(base new new2)
  for r in 0 1 2; do
    for k in 0 1 2; do b=${order[$(((k + r) % 3))]}; echo "-- $b round $r"
      timeout 80 /tmp/b/$b bench codecs --corpora logs --input /dev/shm/real.2g --size 1G --frame-sizes 1M --codecs zstd --runs 2 2>&1 | grep -E "gpu-zstd|cpu-zstd-1"; done
  done
} > $OUT/s23d.txt 2>&1
cat $OUT/s23d.txt
