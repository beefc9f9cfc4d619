#!/bin/bash
# repro-7: packaging/shrinkfs-mount@.service says "a second SIGTERM (after TimeoutStopSec) forces",
# but with KillMode=mixed and no FinalKillSignal=/ExecStop=, systemd sends SIGKILL after
# TimeoutStopSec (systemd.kill(5)), not a second SIGTERM. This replays that sequence by hand
# (systemd is not PID 1 here): ExecStart in the foreground, a writer holding a file open,
# SIGTERM, then SIGKILL after a (shortened) stop timeout. Result: a dead FUSE mount left at the
# mount point (ENOTCONN) instead of the documented forced, clean detach (exit 1).
B=/work/bin-new/shrinkfs-s31base; export SHRINKFS_CONFIG=
D=/tmp/probe31e/rp7; rm -rf $D 2>/dev/null; mkdir -p $D/b $D/m
$B mount $D/b $D/m 2>$D/log & mp=$!
for i in $(seq 50); do mountpoint -q $D/m && break; sleep 0.1; done
python3 -c "
import os, time
fd = os.open('$D/m/app.log', os.O_WRONLY|os.O_CREAT|os.O_APPEND)
while True:
    os.write(fd, b'line\n'); time.sleep(0.2)
" 2>/dev/null & wp=$!
sleep 1
kill -TERM $mp          # systemctl stop
sleep 3                 # TimeoutStopSec (300 s in the unit)
kill -KILL $mp 2>/dev/null; kill -KILL $wp 2>/dev/null   # KillMode=mixed: SIGKILL to all
wait $mp 2>/dev/null; wait $wp 2>/dev/null
dead=0; grep -q " $D/m " /proc/mounts && ! ls $D/m >/dev/null 2>&1 && dead=1
err=$(ls $D/m 2>&1 | head -1)
umount -l $D/m 2>/dev/null
[ $dead = 1 ] && echo "FAIL systemd stop sequence (SIGTERM, then SIGKILL at TimeoutStopSec) leaves a dead mount: $err" || echo "PASS mount point clean after stop"
