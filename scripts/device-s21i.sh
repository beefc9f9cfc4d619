#!/bin/bash
# Session 21, ninth call (34bf6c0): one cold sequential reader through a `--gpu off` and a `--gpu
# auto` mount (the call before had auto at 0.82x in one sample): `bench fs` seq-write and
# seq-read of 1 GiB of a tar of /usr, the two targets in both orders, three times.
set -u
. scripts/device-setup.sh new
w=/dev/shm/p21; rm -rf $w; mkdir -p $w/boff $w/bauto $w/off $w/auto
/tmp/b/new mount $w/boff $w/off --gpu off --daemon
/tmp/b/new mount $w/bauto $w/auto --gpu auto --daemon
sleep 2
for r in 1 2 3; do
  for order in "off auto" "auto off"; do
    set -- $order
    timeout 100 /tmp/b/new bench fs --target $1=$w/$1 --target $2=$w/$2 --data-file /dev/shm/real.2g --size 1G \
      --workloads seq-write,seq-read 2>&1 | grep -E "^seq" 
  done
done > $OUT/seq-off-auto.txt 2>&1
umount $w/off; umount $w/auto
cat $OUT/seq-off-auto.txt
