#!/bin/bash
# LOW: a write into a stored sparse file stages its whole logical size (documented), and the
# writer blocks uninterruptibly meanwhile: even SIGKILL waits until staging completes
# (the mount does not act on FUSE_INTERRUPT). For `truncate -s 1T` + a write at the end this
# meant a writer stuck in D state for minutes while /tmp filled with ~55 GB of zeros.
# Uses ~2 GiB of temporary disk in $P/r3/stg.
. /tmp/probe31c/lib.sh
D=$P/r3; rm -rf $D; mkdir -p $D/stg
smount $D/b $D/mnt --staging-dir $D/stg || exit 2
truncate -s 2G $D/mnt/sp
python3 -c "
import os; fd=os.open('$D/mnt/sp', os.O_WRONLY); os.pwrite(fd, b'END', 2*1024**3-3); os.close(fd)" & WP=$!
sleep 1; t0=$(date +%s.%N); kill -9 $WP 2>/dev/null
while kill -0 $WP 2>/dev/null; do sleep 0.05; done; t1=$(date +%s.%N)
wait $WP 2>/dev/null
dt=$(echo "$t1 - $t0" | bc)
sumount $D/mnt; rm -rf $D
if (( $(echo "$dt > 1.0" | bc) )); then echo "FAIL: SIGKILLed writer took ${dt}s to die (blocked in FUSE write while staging)"; else echo "PASS (${dt}s)"; fi
