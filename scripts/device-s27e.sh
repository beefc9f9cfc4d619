#!/bin/bash
# Session 27: which session's build made one cold zstd-1 reader cost more CPU on the 16-core
# host (BENCHMARKS §5 rounds 17-18): session 24's final build (b24), session 25's (b25) and
# session 26's (b27), pairwise alternated through scripts/ab-write.sh, one writer of 2 GiB of a
# tar of /usr, then its cold read, 3 runs a pair.
set -u
. scripts/device-setup.sh b24 b25 b27
{
  cat .devab/REV
  bash scripts/ab-write.sh /tmp/b/b24 /tmp/b/b25 /dev/shm/real.2g 3 "zstd" 1
  bash scripts/ab-write.sh /tmp/b/b25 /tmp/b/b27 /dev/shm/real.2g 3 "zstd" 1
} > $OUT/s27e-reader-bisect.txt 2>&1
cat $OUT/machine.txt $OUT/s27e-reader-bisect.txt
