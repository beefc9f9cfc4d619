#!/bin/bash
# repro-6: kill -9 of a `--daemon` mount, then an immediate restart at the same mount point: while
# the killed process is still an unreaped zombie (its FUSE mount already dead: "Transport endpoint
# is not connected"), the new mount is refused ("already a mount point", exit 2) instead of
# clearing the dead mount as OPERATING.md promises. A daemon is reparented to PID 1; wherever
# PID 1 reaps late or never (containers without a real init; here PID 1 reaps lazily) the mount
# point stays dead until someone runs umount -l by hand.
B=/work/bin-new/shrinkfs-s31base; export SHRINKFS_CONFIG=
D=/tmp/probe31e/rp6; rm -rf $D 2>/dev/null; mkdir -p $D/b $D/m
fails=0; tries=0; note=
for i in 1 2 3 4 5; do
  tries=$i
  $B mount $D/b $D/m --daemon || { echo "FAIL first mount failed"; exit 1; }
  echo data > $D/m/f
  K=$(pgrep -f "shrinkfs-s31base mount $D/b $D/m"); kill -9 $K; sleep 0.2
  st=$(ps -o stat= -p $K | tr -d ' ')
  $B mount $D/b $D/m --daemon 2>$D/err; rc=$?
  if [ $rc = 0 ] && [ "$(cat $D/m/f 2>/dev/null)" = data ]; then $B unmount $D/m; else
     fails=$((fails+1)); note="killed pid state '$st', rc=$rc: $(head -c 90 $D/err)"; umount -l $D/m 2>/dev/null; break; fi
done
for pid in $(pgrep -f "shrinkfs-s31base mount $D/"); do kill -9 $pid; done; umount -l $D/m 2>/dev/null
[ $fails = 0 ] && echo "PASS $tries restarts over a dead mount all recovered" || echo "FAIL restart right after kill -9 refused at try $tries: $note"
