#!/bin/bash
# Issue 14 probe on the GPU host under $OUT: cold readers through one build (.devab/new.gz) with
# the mount's readahead (its bdi's read_ahead_kb) at the mount's 1 MiB and larger, alternated:
# 1 reader of 2 GiB and 8 readers of 512 MiB, `--codec none` and zstd-1, `--gpu off`.
set -u
. scripts/device-setup.sh new
for rep in 1 2; do
  for w in 1 8; do
    data=/dev/shm/real.512m; [ $w = 1 ] && data=/dev/shm/real.2g
    for ra in 1024 4096 16384; do
      echo "== readers=$w read_ahead_kb=$ra rep=$rep"
      AB_VARIANTS=new AB_BDI="read_ahead_kb=$ra" scripts/ab-write.sh /tmp/b/new /tmp/b/new $data 1 "none zstd" $w 2>&1 | grep -v "^#"
    done
  done
done > $OUT/readahead.txt 2>&1
echo done >> $OUT/readahead.txt
