#!/bin/bash
# Round 7, second call, on the GPU host under $OUT: the GPU's threads at nice -10 (.devab/new.gz)
# against the build before (.devab/old.gz), alternated: 8 zstd-1 writers of 512 MiB, a mount that
# has written 256 MiB first, `--gpu on` and `auto` (and `off`, which starts no GPU thread, once
# per round), idle and with 16 CPU-bound loops beside.
set -u
. scripts/device-setup.sh old new ${ROUND7_MORE:-}
export AB_WARM=1
# The nice value of each of the mount's threads by name, after the warm-up (to stderr).
export AB_AFTER_WARM='ps -L -o ni=,comm= -p $pid | sort | uniq -c | sed "s/^/  threads: /" >&2; true'
for load in idle busy; do
  if [ $load = busy ]; then for i in $(seq 16); do ( while :; do :; done ) & done; sleep 1; fi
  for rep in 1 2; do
    echo "== $load, --gpu off"
    AB_VARIANTS=new AB_GPU=off scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.512m 1 zstd 8 | grep -v "^#"
    for g in on auto; do
      echo "== $load, --gpu $g"
      AB_VARIANTS="old new" AB_GPU=$g scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.512m 1 zstd 8 | grep -v "^#"
    done
  done
  if [ $load = busy ] && [ -x /tmp/b/first ]; then
    # The first cut (6c36b51), whose CPU workers could start from the GPU's thread.
    echo "== $load, --gpu on, first cut"
    AB_VARIANTS=new AB_GPU=on scripts/ab-write.sh /tmp/b/first /tmp/b/first /dev/shm/real.512m 1 zstd 8 | grep -v "^#"
  fi
  if [ $load = busy ]; then kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; fi
done > $OUT/nice-ab.txt 2>&1
echo done >> $OUT/nice-ab.txt
