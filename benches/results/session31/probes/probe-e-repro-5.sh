#!/bin/bash
# repro-5: --cache-dir inside the bucket directory is accepted (inside the mount point is refused):
# the cache's frame files then show in the mount as ordinary files of the bucket.
B=/work/bin-new/shrinkfs-s31base; export SHRINKFS_CONFIG=
D=/tmp/probe31e/rp5; rm -rf $D; mkdir -p $D/b $D/m
$B mount $D/b $D/m --cache-dir $D/b/cache --daemon 2>$D/err; rc=$?
if [ $rc != 0 ]; then echo "PASS refused (rc=$rc)"; exit 0; fi
head -c 3000000 /dev/urandom > $D/m/data; sync
$B unmount $D/m; $B mount $D/b $D/m --cache-dir $D/b/cache --daemon
cat $D/m/data > /dev/null
n=$(find $D/m/cache -type f 2>/dev/null | wc -l)
$B unmount $D/m
for pid in $(pgrep -f "shrinkfs-s31base mount $D/"); do kill -9 $pid; done
[ "$n" -gt 0 ] && echo "FAIL --cache-dir inside the bucket accepted; $n cache frame file(s) visible in the mount under /cache" || echo "PASS no cache files visible"
