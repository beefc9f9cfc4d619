#!/bin/bash
# FIFO placed in a local-directory bucket by another program: open/read of it through the mount blocks a
# mount thread indefinitely; the reader is in D state and survives SIGKILL; with --threads 2, two such
# readers block every other request of the mount (a read of an ordinary file hangs too).
. /tmp/probe30b/lib.sh
B=$P/r1b; M=$P/r1m; rm -rf $B; mkdir -p $B; mkfifo $B/fifo1 $B/fifo2; echo ok > $B/file
mnt_up $B $M --threads 2 || exit 1
cat $M/fifo1 >/dev/null 2>&1 & p1=$!
cat $M/fifo2 >/dev/null 2>&1 & p2=$!
sleep 2; kill -KILL $p1 $p2; sleep 1
timeout -s KILL 5 cat $M/file >/dev/null 2>&1 & p3=$!
sleep 6
r=0
[ -d /proc/$p1 ] && { echo "FAIL: cat of bucket FIFO survives SIGKILL (wchan=$(cat /proc/$p1/wchan 2>/dev/null))"; r=1; }
pgrep -f "cat $M/file" >/dev/null && { echo "FAIL: read of an ordinary file of the same mount hangs too"; r=1; }
[ $r = 0 ] && echo PASS
# unblock from outside (open each FIFO for writing a few times), then unmount
for i in 1 2 3; do for f in fifo1 fifo2; do timeout 2 sh -c "exec 3>$B/$f" 2>/dev/null; done; done; sleep 1
mpid=$(pgrep -f "mount $B $M")
mnt_down $M; sleep 1; [ -n "$mpid" ] && kill $mpid 2>/dev/null
exit $r
