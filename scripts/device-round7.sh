#!/bin/bash
# Round 7 on the GPU host, under $OUT. 1) Issue 14: the build before (.devab/old.gz) against the
# new one (.devab/new.gz), alternated: 1 writer/reader of 2 GiB and 8 of 512 MiB, `none` and
# zstd-1. 2) Issue 15, a probe: 8 zstd-1 writers with 16 CPU-bound loops beside, `--gpu off`,
# `on`, and `on` with the mount's GPU threads reniced to -10 after a warm-up (its launch threads,
# started later, inherit that), to see how much of `on`'s loss on a busy host is its host side
# waiting for a core.
set -u
. scripts/device-setup.sh old new
if [ -z "${ROUND7_BUSY_ONLY:-}" ]; then
  scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.2g 3 "none zstd" 1 > $OUT/ab-1.txt 2>&1
  scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.512m 3 "none zstd" 8 > $OUT/ab-8.txt 2>&1
fi
export AB_VARIANTS=new AB_WARM=1
hook='for t in /proc/$pid/task/*; do [ "$(cat $t/comm)" = shrinkfs-gpu ] && renice -n -10 -p ${t##*/} >/dev/null; done; ps -L -o tid=,ni=,comm= -p $pid | grep -c " -10 shrinkfs-gpu" | sed "s/^/reniced threads: /" >&2; true'
for i in $(seq 16); do ( while :; do :; done ) & done
sleep 1
for rep in 1 2 3; do for g in off on on+nice; do
  h=""; [ $g = on+nice ] && h=$hook
  echo "== busy, --gpu $g"
  AB_GPU=${g%+nice} AB_AFTER_WARM="$h" scripts/ab-write.sh /tmp/b/new /tmp/b/new /dev/shm/real.512m 1 zstd 8 | grep -v "^#"
done; done > $OUT/busy-nice.txt 2>&1
kill $(jobs -p) 2>/dev/null; wait 2>/dev/null
echo done >> $OUT/busy-nice.txt
