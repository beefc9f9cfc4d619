#!/bin/bash
# A mount killed while filling --cache-dir leaves ".<frame>.frame.tmp" files there; later mounts
# never remove them (nor count them in --cache-size), so they pile up with every crash.
B=/work/bin-new/shrinkfs-s30base; T=$(mktemp -d /tmp/r6.XXXX); mkdir $T/b $T/m $T/c
$B mount $T/b $T/m --gpu off --log-file $T/log --frame-size 16M & P=$!; for i in $(seq 100); do mountpoint -q $T/m && break; sleep 0.1; done
for k in 1 2 3 4 5 6; do head -c 60000000 /dev/urandom > $T/m/big$k; done; echo small > $T/m/small; $B unmount $T/m
for t in 1 2 3 4 5 6; do
  $B mount $T/b $T/m --gpu off --log-file $T/log --cache-dir $T/c --cache-size 64M & P=$!
  for i in $(seq 100); do mountpoint -q $T/m && break; sleep 0.1; done
  python3 -c "
import os,sys,time
d=sys.argv[1]; t=time.time(); old=set(os.listdir(d))
while time.time()-t<5:
    if any(n.endswith('.tmp') and n not in old for n in os.listdir(d)): os.kill(int(sys.argv[2]),9); break
" $T/c $P & K=$!
  sleep 0.2; cat $T/m/big$t > /dev/null 2>&1; wait $K
  kill -9 $P 2>/dev/null; wait $P 2>/dev/null; sleep 0.3; umount -l $T/m 2>/dev/null; echo "crash $t: tmp files: $(ls -a $T/c | grep "tmp$" | tr "\n" " ")"
  rm -f /run/shrinkfs/*.$P
done
N1=$(ls -a $T/c | grep -c '\.tmp$')
$B mount $T/b $T/m --gpu off --log-file $T/log --cache-dir $T/c --cache-size 64M & P=$!
for i in $(seq 100); do mountpoint -q $T/m && break; sleep 0.1; done
cat $T/m/small > /dev/null; sleep 2; $B unmount $T/m
N2=$(ls -a $T/c | grep -c '\.tmp$')
echo "tmp files after 6 crashes: $N1; after a clean mount+read+unmount: $N2 ($(du -cb $T/c/.*.tmp 2>/dev/null | tail -1 | cut -f1) bytes)"
rm -rf $T
[ $N1 -gt 0 ] && [ $N2 -gt 0 ] && echo FAIL || echo PASS
