#!/bin/bash
# Time to store a file grown by truncate (a sparse disk image: `truncate -s SIZE img`) through a
# fresh mount of a local-directory bucket, staging beside it: the truncate returns once the
# object is stored. Prints the time and the stored object's size, then PASS when it took under
# LIMIT seconds. Usage: SF=path/to/shrinkfs SIZE=16G LIMIT=100 benches/compare/truncate-grow.sh
SF=${SF:-shrinkfs}
SIZE=${SIZE:-64G}; LIMIT=${LIMIT:-10}
W=$(mktemp -d); mkdir -p $W/b $W/m
$SF mount $W/b $W/m --daemon --log-file $W/log --staging-dir $W || { echo FAIL mount; exit 1; }
for i in $(seq 50); do mountpoint -q $W/m && break; sleep 0.1; done
t0=$(date +%s.%N); truncate -s $SIZE $W/m/img; rc=$?; t1=$(date +%s.%N)
el=$(python3 -c "print(round($t1-$t0,2))")
echo "truncate -s $SIZE: rc=$rc, ${el}s; stored object $(stat -c %s $W/b/img) bytes"
fusermount3 -u $W/m; for i in $(seq 100); do mountpoint -q $W/m || break; sleep 0.1; done
rm -rf $W
python3 -c "import sys; sys.exit(0 if $el < $LIMIT and $rc == 0 else 1)" && echo PASS || echo FAIL
