#!/bin/bash
# repro-3: `mount -o remount,exec DIR` (mount(8) -> /sbin/mount.fuse.shrinkfs) exits 0 but the
# mount stays noexec; `remount,codec=lz4` likewise exits 0 and changes nothing.
# Runs in a private mount namespace where /usr/sbin carries mount.shrinkfs/mount.fuse.shrinkfs
# links to the binary under test (the host's /sbin links are left alone).
D=/tmp/probe31e/rp3; rm -rf $D; mkdir -p $D/sbin $D/b $D/m
for f in /usr/sbin/*; do ln -sf "$f" $D/sbin/; done
ln -sfn /work/bin-new/shrinkfs-s31base $D/sbin/mount.shrinkfs; ln -sfn /work/bin-new/shrinkfs-s31base $D/sbin/mount.fuse.shrinkfs
unshare -m --propagation private bash -c '
D=/tmp/probe31e/rp3; export SHRINKFS_CONFIG=
mount --bind $D/sbin /usr/sbin || exit 1
mount -t shrinkfs $D/b $D/m -o noexec || { echo "FAIL could not mount"; exit 1; }
printf "#!/bin/sh\necho ran\n" > $D/m/s.sh; chmod +x $D/m/s.sh
mount -o remount,exec $D/m; rc=$?
opts=$(findmnt -n -o OPTIONS -M $D/m); out=$($D/m/s.sh 2>&1)
umount $D/m; sleep 0.3
if [ $rc = 0 ] && echo "$opts" | grep -q noexec; then echo "FAIL mount -o remount,exec exited 0 but the mount is still noexec ($out)";
elif [ $rc != 0 ]; then echo "PASS remount,exec refused (rc=$rc)"; else echo "PASS remount,exec applied"; fi'
for pid in $(pgrep -f "shrinkfs-s31base mount $D/"); do kill -9 $pid; done
