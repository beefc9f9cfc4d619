#!/bin/bash
# Experiment on the GPU host, under $OUT: `--gpu auto` with the rule "a full launch waiting means
# the cores are behind: launch it" (.devab/new.gz) against 62a662f (.devab/old.gz), whose `auto`
# launches only when a launch is measured to take half the cores' time for its frames. 8 zstd-1
# writers of 512 MiB through warmed mounts (`off`, `on` and both `auto`s), and `pack` of 4 GiB of
# real files (`off`, both `auto`s), idle and with 16 CPU-bound loops beside.
set -u
. scripts/device-setup.sh old new
cat /dev/shm/real.2g /dev/shm/real.2g > /dev/shm/usr4g
T="/usr/bin/time -f wall=%e,user=%U,sys=%S"
p() { rm -f /dev/shm/out.skf; echo "pack $1 --gpu $2: $( { $T /tmp/b/$1 pack --gpu $2 /dev/shm/usr4g /dev/shm/out.skf; } 2>&1 | tail -1) stored=$(stat -c %s /dev/shm/out.skf)"; }
export AB_WARM=1
for load in idle busy; do
  if [ $load = busy ]; then for i in $(seq 16); do ( while :; do :; done ) & done; sleep 1; fi
  for rep in 1 2; do
    echo "== $load: 8 writers, --gpu off and on (old)"
    AB_VARIANTS=old AB_GPU=off scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.512m 1 zstd 8 | grep -v "^#"
    AB_VARIANTS=old AB_GPU=on scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.512m 1 zstd 8 | grep -v "^#"
    echo "== $load: 8 writers, --gpu auto (old, new)"
    AB_VARIANTS="old new" AB_GPU=auto scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.512m 1 zstd 8 | grep -v "^#"
  done
  echo "== $load: pack"
  for rep in 1 2; do p old off; p old auto; p new auto; done
  if [ $load = busy ]; then kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; fi
done > $OUT/auto-backlog.txt 2>&1
echo done >> $OUT/auto-backlog.txt
