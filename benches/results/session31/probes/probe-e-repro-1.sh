#!/bin/bash
# repro-1: a mount point inside the bucket directory is accepted, and the first `ls -l` of the
# mount deadlocks the mount with itself (FUSE self-deadlock); unmount says busy, a forced stop
# (2x SIGTERM) leaves an unkillable process; only an abort through fusectl recovers.
B=/work/bin-new/shrinkfs-s31base; export SHRINKFS_CONFIG=
T=/tmp/probe31e/rp1; rm -rf $T 2>/dev/null; mkdir -p $T/b/mnt
echo plain > $T/b/p.txt
$B mount $T/b $T/b/mnt --daemon --log-file $T/log; rc=$?
if [ $rc -ne 0 ]; then echo "PASS mount inside bucket refused (rc=$rc)"; exit 0; fi
pid=$(pgrep -f "mount $T/b $T/b/mnt"); conn=$(stat -c %d $T/b/mnt)
ls -l $T/b/mnt >/dev/null 2>&1 & lp=$!
for i in $(seq 1 50); do kill -0 $lp 2>/dev/null || break; sleep 0.1; done
hung=0; kill -0 $lp 2>/dev/null && hung=1
# recovery
if [ $hung = 1 ]; then
  kill -TERM $pid; sleep 0.5; kill -TERM $pid; sleep 1
  unshare -m --propagation private sh -c "mount -t fusectl none /sys/fs/fuse/connections && echo 1 > /sys/fs/fuse/connections/$conn/abort"
  wait $lp 2>/dev/null
else
  $B unmount $T/b/mnt
fi
umount -l $T/b/mnt 2>/dev/null
kill -9 $pid 2>/dev/null
if [ $hung = 1 ]; then echo "FAIL mount point inside the bucket accepted; ls -l of the mount hung >5s (FUSE self-deadlock; needed fusectl abort)"; else echo "PASS ls completed"; fi
