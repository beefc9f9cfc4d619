#!/bin/bash
# repro-1: `shrinkfs unpack OBJ OUT` (and `pack`) replace a special file OUT (char device such as
# /dev/null, a FIFO) with a regular file holding the decoded bytes, instead of writing into it.
B=${B:-/work/bin-new/shrinkfs-s31base}
W=$(mktemp -d /tmp/probe31d/r1.XXXXXX); trap 'rm -rf "$W"' EXIT
cd "$W" || exit 1
( umask 077; head -c 32 /dev/urandom > key )
echo "TOP SECRET PLAINTEXT" > secret.txt
$B pack --key-file key secret.txt secret.skf || { echo "FAIL setup: pack failed"; exit 1; }
mknod -m 666 nulldev c 1 3                     # stands in for /dev/null
mkfifo fifo
$B unpack --key-file key secret.skf nulldev 2>/dev/null; rc1=$?
( timeout 5 cat fifo > fifo.read & ) ; sleep 0.2
timeout 10 $B unpack --key-file key secret.skf fifo 2>/dev/null; rc2=$?
sleep 0.3; : > /dev/null
dev_ok=1; [ -c nulldev ] || dev_ok=0
fifo_ok=1; [ -p fifo ] || fifo_ok=0
# unblock a reader left waiting, if any
[ -p fifo ] && (exec 3<>fifo) 2>/dev/null
if [ $dev_ok = 1 ] && [ $fifo_ok = 1 ]; then
  echo "PASS: unpack wrote into the device node and the FIFO (rc $rc1/$rc2)"; exit 0
fi
echo "FAIL: unpack (rc $rc1, $rc2) replaced special files with regular files: nulldev is now '$(stat -c '%F %a' nulldev)' holding '$(head -c 40 nulldev 2>/dev/null)', fifo is now '$(stat -c '%F' fifo)'; as root 'shrinkfs unpack x.skf /dev/null' replaces /dev/null with a world-readable file of plaintext"
exit 1
