#!/bin/bash
# Alternating stat storms on two builds: each its own local bucket on /dev/shm with 10,000 files.
set -u
W=/dev/shm/statab; rm -rf $W; mkdir -p $W
declare -A BIN=([old]=${OLD:-/work/bin-new/shrinkfs-s27base} [new]=${NEW:-/work/bin-new/shrinkfs-s27f})
for l in old new; do
  mkdir -p $W/$l/b $W/$l/m
  ${BIN[$l]} mount $W/$l/b $W/$l/m --daemon --log-file $W/$l/log
  python3 -c "
import os,sys
d=sys.argv[1]
for i in range(10000):
    open(os.path.join(d,'f%05d'%i),'wb').write(b'x'*100)
" $W/$l/m
done
for round in 1 2 3 4 5 6; do
  for l in old new; do
    [ $((round % 2)) = 0 ] && l=$([ $l = old ] && echo new || echo old)
    sync; echo 3 > /proc/sys/vm/drop_caches; sleep 1.5
    python3 -c "
import os,sys,time
d=sys.argv[1]; names=['f%05d'%i for i in range(10000)]
t=time.perf_counter()
for n in names: os.stat(os.path.join(d,n))
print(sys.argv[2], round(10000/(time.perf_counter()-t)))
" $W/$l/m $l
  done
done
for l in old new; do fusermount3 -u $W/$l/m; done
rm -rf $W
