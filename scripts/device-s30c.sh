#!/bin/bash
# Session 30, third call: the session's head (.devab/new.gz) against the build before it
# (.devab/old.gz; see .devab/REV), alternated, idle host, default settings: 4 and 8 writers of
# 2 GiB of a tar of /usr under `auto` and `off` (peak resident size of each mount), then one
# writer of 2 GiB with `--codec none` and zstd-1 and its cold read (scripts/ab-write.sh), and 8
# cold readers of 512 MiB (zstd-1).
set -u
. scripts/device-setup.sh new old
sed -n '/^mw()/,/^}/p' scripts/device-s30b.sh > /tmp/mw.sh; . /tmp/mw.sh
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p30
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV); idle"
  for r in 1 2; do for n in 4 8; do for g in auto off; do for b in old new; do mw $b "$g w$n" $n $g 1; done; done; done; done
  bash scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.2g 2 "none zstd" 1
  bash scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.512m 2 "zstd" 8
} > $OUT/s30c.txt 2>&1
cat $OUT/machine.txt $OUT/s30c.txt
