#!/bin/bash
# Kept file (last close failed with ENOSPC on a full local-directory bucket) is not readable:
# read(2) returns ENOSPC for seconds, although SEMANTICS.md says a kept file "still shows and reads as written".
. /tmp/probe31c/lib.sh
D=$P/r1; mkdir -p $D/small; umount $D/small 2>/dev/null
mount -t tmpfs -o size=20m tmpfs $D/small
smount $D/small $D/mnt || exit 2
python3 - $D/mnt <<'PY'
import os, sys
os.chdir(sys.argv[1])
with open('keep','wb') as f: f.write(os.urandom(5<<20))
fd=os.open('fill', os.O_WRONLY|os.O_CREAT|os.O_TRUNC, 0o644)
try:
    while True: os.write(fd, os.urandom(1<<20))
except OSError: pass
try: os.close(fd)
except OSError: pass
new=os.urandom(1<<20)
fd=os.open('keep', os.O_WRONLY|os.O_TRUNC)
w=os.write(fd, new)
try: os.close(fd); c='ok'
except OSError as e: c=e.strerror
try:
    with open('keep','rb') as f: b=f.read()
    r='PASS' if b==new else 'FAIL: kept file reads wrong bytes (len %d)'%len(b)
except OSError as e:
    r='FAIL: write took %d bytes, close said %r, then reading the kept file fails: %s' % (w, c, e.strerror)
print(r)
PY
sumount $D/mnt
umount $D/small
