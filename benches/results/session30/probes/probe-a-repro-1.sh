#!/bin/bash
# Run records in /run/shrinkfs are left behind after `umount DIR`, SIGTERM (systemctl stop), and kill -9 + recovery remount.
B=/work/bin-new/shrinkfs-s30base; T=$(mktemp -d /tmp/r1.XXXX); mkdir $T/m
left=0
for how in umount term kill9; do
  $B mount memory:// $T/m --gpu off --log-file $T/log & P=$!
  for i in $(seq 100); do mountpoint -q $T/m && break; sleep 0.1; done
  case $how in umount) umount $T/m;; term) kill -TERM $P;; kill9) kill -9 $P;; esac
  wait $P 2>/dev/null; sleep 0.5
  if [ $how = kill9 ]; then # recovery remount clears the dead mount, then clean unmount
    $B mount memory:// $T/m --gpu off --log-file $T/log & Q=$!
    for i in $(seq 100); do mountpoint -q $T/m && break; sleep 0.1; done
    $B unmount $T/m; wait $Q
  fi
  r=$(ls /run/shrinkfs | grep -E "\.$P\$")
  if [ -n "$r" ]; then echo "$how: record left: /run/shrinkfs/$r = $(tr '\n' ' ' < /run/shrinkfs/$r)"; left=$((left+1)); rm -f /run/shrinkfs/$r; fi
done
rm -rf $T
[ $left -eq 0 ] && echo PASS || echo "FAIL ($left of 3 ways of ending leave a run record behind forever)"
