#!/bin/bash
# A symlink "rd/up -> .." that another program left in a local-directory bucket is shown as a directory.
# (a) `rm -rf MOUNT/rd` deletes every file of the whole bucket, not just rd.
# (b) `mv MOUNT/rd MOUNT/rd2` moves the bucket's other files (top1.txt, other/keep.txt) into rd2/up/.
. /tmp/probe30b/lib.sh
B=$P/r5b; M=$P/r5m; r=0
setup() { rm -rf $B; mkdir -p $B/rd $B/other; echo T1 > $B/top1.txt; echo O > $B/other/keep.txt; echo F > $B/rd/f; ln -s .. $B/rd/up; }
setup; mnt_up $B $M || exit 1
timeout 60 rm -rf $M/rd; rc=$?
if [ -e $B/top1.txt ] && [ -e $B/other/keep.txt ]; then :; else echo "FAIL(a): rm -rf rd (rc=$rc) deleted files outside rd; bucket now: $(cd $B && find . -type f | tr '\n' ' ')"; r=1; fi
mnt_down $M
setup; mnt_up $B $M || exit 1
timeout 60 mv $M/rd $M/rd2; rc=$?
if [ -e $B/top1.txt ] && [ -e $B/other/keep.txt ]; then :; else echo "FAIL(b): mv rd rd2 (rc=$rc) moved files outside rd; bucket now: $(cd $B && find . -type f | tr '\n' ' ')"; r=1; fi
mnt_down $M
[ $r = 0 ] && echo PASS; exit $r
