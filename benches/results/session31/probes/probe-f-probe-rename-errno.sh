#!/bin/bash
# repro-1: a directory rename that fails partway (S3 server down) returns the wrong errno
# (EEXIST/ENOTEMPTY, "target exists") instead of EIO; coreutils mv then moves src INTO the
# partial dst and exits 0.
source /tmp/probe31f/lib.sh
kind=rclone; port=${1:-9501}
rm -rf $P/root-$kind-$port; export NOWIPE=1
start_server $kind $port; mkbucket bkt >/dev/null
M=$P/r1-mnt; mnt s3://bkt $M --retry-timeout 2
mkdir $M/src; for i in $(seq 1 300); do head -c 200000 /dev/urandom > $M/src/f$i; done
python3 - $M $SRVPID <<'PY' > $P/r1-out.txt
import os,sys,time,errno,signal,threading,ctypes
M,srv=sys.argv[1],int(sys.argv[2])
libc=ctypes.CDLL(None,use_errno=True)
threading.Timer(0.5,lambda: os.kill(srv,signal.SIGTERM)).start()
r=libc.renameat2(-100,(M+'/src').encode(),-100,(M+'/dst').encode(),1)  # RENAME_NOREPLACE, as mv does
e=ctypes.get_errno() if r else 0
print('renameat2 NOREPLACE:', 'ok' if r==0 else errno.errorcode[e])
PY
sleep 1
out=$(cat $P/r1-out.txt); echo "$out"
start_server $kind $port
umnt $M >/dev/null; stop_servers
case "$out" in
  *EEXIST*|*ENOTEMPTY*) echo "FAIL: a rename that failed on a store outage returned $(echo $out|awk '{print $NF}') (dst 'exists') instead of EIO";;
  *EIO*) echo "PASS: rename failed with EIO";;
  *ok*) echo "PASS?: rename completed before the outage (timing), rerun";;
  *) echo "UNKNOWN: $out";;
esac
