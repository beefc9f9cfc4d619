#!/bin/bash
# Symlinks that another program put in a local-directory bucket are followed: reads, writes and deletes
# through the mount reach outside the bucket / the link's target, and rm -rf of the "directory" deletes the target's files.
. /tmp/probe30b/lib.sh
B=$P/r2b; M=$P/r2m; O=$P/r2out; rm -rf $B $O; mkdir -p $B/real $O
echo keep > $B/real/keep.txt; ln -s real $B/alias
echo OUTSIDE > $O/o.txt; ln -s $O $B/outlink
mnt_up $B $M || exit 1
r=0
echo x > $M/outlink/created.txt 2>/dev/null
[ -e $O/created.txt ] && { echo "FAIL: write through mount created $O/created.txt outside the bucket"; r=1; }
rm -rf $M/alias
[ -e $B/real/keep.txt ] || { echo "FAIL: rm -rf of symlink 'alias' deleted $B/real/keep.txt (link itself still there: $(ls $B))"; r=1; }
mnt_down $M; [ $r = 0 ] && echo PASS; exit $r
