#!/bin/bash
# Round 7, second call, on the GPU host under $OUT: the GPU's threads at nice -10 (.devab/new.gz)
# against the build before (.devab/old.gz), alternated: 8 zstd-1 writers of 512 MiB, a mount that
# has written 256 MiB first, `--gpu on` and `auto` (and `off`, which starts no GPU thread, once
# per round), idle and with 16 CPU-bound loops beside.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
umount -l /dev/shm/ab/mnt 2>/dev/null; pkill -f "/tmp/b/.* mount" 2>/dev/null; sleep 0.5
mkdir -p /tmp/b; for v in old new ${ROUND7_MORE:-}; do gunzip -c .devab/$v.gz > /tmp/b/$v; chmod +x /tmp/b/$v; done
{ uname -a; nproc; date -u; nvidia-smi -L; } > $OUT/machine.txt 2>&1
[ -f /dev/shm/real.2g ] || tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
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
