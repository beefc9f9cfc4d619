#!/bin/bash
# Session 24's first device call: the `bench codecs` GPU rows repeated on an H200 host (session
# 23 found gpu-zstd compression 11% lower after the move to cudarc's safe types there, in two
# rounds, and asked for a repeat): base 841c73b and new a24af8e in rotation, four rounds; then
# issue 14's write lines at the head's library code (a24af8e): one writer of 2 GiB and eight of
# 512 MiB, `--codec none` and zstd-1, `--gpu off`, with the mount's CPU-seconds per GiB.
set -u
. scripts/device-setup.sh base new
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores; $(cat .devab/REV)"
  order=(base new)
  for r in 0 1 2 3; do
    for k in 0 1; do b=${order[$(((k + r) % 2))]}; echo "-- $b round $r"
      timeout 80 /tmp/b/$b bench codecs --corpora logs --input /dev/shm/real.2g --size 1G --frame-sizes 1M --codecs zstd --runs 2 2>&1 | grep -E "gpu-zstd|cpu-zstd-1"; done
  done
} > $OUT/s24-codecs.txt 2>&1
cat $OUT/s24-codecs.txt
{
  AB_VARIANTS=new bash scripts/ab-write.sh /tmp/b/new /tmp/b/new /dev/shm/real.2g 3 "none zstd" 1
  AB_VARIANTS=new bash scripts/ab-write.sh /tmp/b/new /tmp/b/new /dev/shm/real.512m 3 "none zstd" 8
} > $OUT/s24-lines.txt 2>&1
cat $OUT/s24-lines.txt
