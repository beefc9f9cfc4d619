#!/bin/bash
# --cache-min-free is only honoured while the cache itself grows: when another program fills the
# cache's disk, the disk cache keeps all its entries (disk at 100%) even as it keeps missing.
B=/work/bin-new/shrinkfs-s30base; T=$(mktemp -d /tmp/r4.XXXX); mkdir $T/b $T/m $T/fs
$B mount $T/b $T/m --gpu off --log-file $T/log & P=$!; for i in $(seq 100); do mountpoint -q $T/m && break; sleep 0.1; done
for i in 1 2; do head -c 50000000 /dev/urandom > $T/m/f$i; done; $B unmount $T/m
mount -t tmpfs -o size=200M tmpfs $T/fs; mkdir $T/fs/cache
$B mount $T/b $T/m --gpu off --log-file $T/log --cache-dir $T/fs/cache & P=$!; for i in $(seq 100); do mountpoint -q $T/m && break; sleep 0.1; done
cat $T/m/f1 > /dev/null                                   # cache now holds ~50 MB
head -c 300000000 /dev/zero > $T/fs/other 2>/dev/null     # another program fills the disk
cat $T/m/f2 > /dev/null; sleep 2                          # 48 more frames miss the cache
AVAIL=$(df -B1 --output=avail $T/fs | tail -1); CACHE=$(du -sb $T/fs/cache | cut -f1)
echo "disk 200 MiB, min-free 5% (10485760), avail=$AVAIL, cache holds $CACHE bytes"
$B unmount $T/m; umount $T/fs; rm -rf $T
[ $AVAIL -ge 9000000 ] && echo PASS || echo FAIL
