#!/bin/bash
# One file with a non-UTF-8 name anywhere in a local-directory bucket (here 3 levels deep, written by
# another program) makes the whole bucket unmountable, even with --skip-key-check.
. /tmp/probe30b/lib.sh
B=$P/r4b; M=$P/r4m; rm -rf $B; mkdir -p $B/d/e/f $M; echo hello > $B/good.txt
python3 -c "open(b'$B/d/e/f/caf\xe9.txt','wb').write(b'latin-1 name')"
out=$($BIN mount $B $M --gpu off --daemon --skip-key-check --log-file $P/log-r4.txt 2>&1); rc=$?
if [ $rc = 0 ] && [ "$(cat $M/good.txt 2>/dev/null)" = hello ]; then echo PASS; r=0
else echo "FAIL: mount refused (rc=$rc): $out"; r=1; fi
mountpoint -q $M && mnt_down $M; exit $r
