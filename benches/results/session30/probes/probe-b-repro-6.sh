#!/bin/bash
# A file another program left in a local-directory bucket with an mtime before 1970 shows through the mount
# as 1970-01-01 (and -0.5 s shows as +0.5 s). Files written through the mount keep such times fine.
. /tmp/probe30b/lib.sh
B=$P/r6b; M=$P/r6m; rm -rf $B; mkdir -p $B
echo x > $B/old; touch -d '1960-01-01 00:00:00 UTC' $B/old
echo y > $B/half; touch -d '1969-12-31 23:59:59.5 UTC' $B/half
mnt_up $B $M || exit 1
a=$(stat -c %Y $B/old); b=$(stat -c %Y $M/old); c=$(stat -c %y $B/half); d=$(stat -c %y $M/half)
mnt_down $M
if [ "$a" = "$b" ] && [ "$c" = "$d" ]; then echo PASS; exit 0; fi
echo "FAIL: old: bucket $a mount $b; half: bucket '$c' mount '$d'"; exit 1
