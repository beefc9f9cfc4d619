#!/bin/bash
# Empty directories another program made in a local-directory bucket (no .shrinkfs.dir marker):
# rmdir / rm -rf / mv through the mount return 0 but leave the directory in the bucket; it shows again.
. /tmp/probe30b/lib.sh
B=$P/r3b; M=$P/r3m; rm -rf $B; mkdir -p $B/e1 $B/e2/y/z $B/e3 $B/e4
python3 -c "import socket; socket.socket(socket.AF_UNIX).bind('$B/e4/sock')"
mnt_up $B $M || exit 1
r=0
rmdir $M/e1; rc1=$?; rm -rf $M/e2; rc2=$?; mv $M/e3 $M/e3new; rc3=$?; rmdir $M/e4; rc4=$?
sleep 2
[ $rc1 = 0 ] && [ -d $M/e1 ] && { echo "FAIL: rmdir e1 returned 0 but e1 still exists (bucket+mount)"; r=1; }
[ $rc2 = 0 ] && [ -d $M/e2 ] && { echo "FAIL: rm -rf e2 returned 0 but e2 (and e2/y/z) still exist"; r=1; }
[ $rc3 = 0 ] && [ -d $M/e3 ] && { echo "FAIL: mv e3 e3new returned 0 but e3 still exists beside e3new"; r=1; }
[ $rc4 = 0 ] && [ -e $B/e4/sock ] && { echo "FAIL: rmdir e4 returned 0 although e4 holds a (hidden) socket; e4 still there"; r=1; }
[ $r = 0 ] && echo PASS
mnt_down $M; exit $r
