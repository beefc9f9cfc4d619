#!/bin/bash
# repro-4: the mount helper does not understand quoted option values (fstab/libmount syntax
# name="value"): a comma inside quotes splits the option, and quotes are kept as part of the value,
# so log-file="q.log" creates a file literally named "q.log" (with the quotes) in the cwd.
B=/work/bin-new/shrinkfs-s31base; export SHRINKFS_CONFIG=
D=/tmp/probe31e/rp4; rm -rf $D; mkdir -p $D/b $D/m $D/bin
ln -sfn $B $D/bin/mount.shrinkfs
cd $D
$D/bin/mount.shrinkfs $D/b $D/m -o 'log-file="q.log"' 2>$D/err1; rc1=$?
mountpoint -q $D/m && $B unmount $D/m
$D/bin/mount.shrinkfs $D/b $D/m -o "log-file=\"$D/a,b.log\"" 2>$D/err2; rc2=$?
mountpoint -q $D/m && $B unmount $D/m
for pid in $(pgrep -f "shrinkfs-s31base mount $D/"); do kill -9 $pid; done
if [ -e "$D/\"q.log\"" ]; then echo "FAIL quoted value kept with its quotes: created file '\"q.log\"' (rc=$rc1); comma in quotes: rc=$rc2 $(head -c 80 $D/err2)";
else echo "PASS quoted values handled (rc=$rc1/$rc2)"; fi
