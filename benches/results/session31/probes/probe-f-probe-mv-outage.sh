#!/bin/bash
# repro-2: `mv src dst` of a directory during a short S3 outage: trace what rename returns and where the files end up
source /tmp/probe31f/lib.sh
kind=rclone; port=${1:-9511}; KD=${KD:-0.9}
rm -rf $P/root-$kind-$port; export NOWIPE=1
start_server $kind $port; mkbucket bkt >/dev/null
M=$P/r2-mnt; mnt s3://bkt $M --retry-timeout 2
mkdir $M/src; for i in $(seq 1 300); do head -c 200000 /dev/urandom > $M/src/f$i; done
( strace -f -e trace=renameat2,rename,renameat,unlinkat,rmdir,mkdir,openat -o $P/r2-strace.txt mv $M/src $M/dst; echo "mv rc=$?" ) > $P/r2-mv.txt 2>&1 &
MV=$!
sleep $KD; kill $SRVPID; wait $SRVPID 2>/dev/null
sleep 8; start_server $kind $port; wait $MV
cat $P/r2-mv.txt; grep -E "rename|rmdir|mkdir" $P/r2-strace.txt | grep -v ENOENT | head -5 | cut -c1-200
echo "entries in dst: $(ls $M/dst | wc -l)  (src exists: $([ -e $M/src ] && echo yes || echo no); dst/src: $(ls $M/dst/src 2>/dev/null | wc -l))"
umnt $M >/dev/null; stop_servers
