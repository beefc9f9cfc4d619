#!/bin/bash
# --writeback-cache: an overwrite that the full bucket refuses leaves the live mount showing
# the NEW size with the OLD content padded by zeros (bytes never written), instead of the
# previous version (SEMANTICS.md "Durability": previous version stays; reads fail with EIO).
. /tmp/probe31c/lib.sh
D=$P/r2; mkdir -p $D/small; umount $D/small 2>/dev/null
mount -t tmpfs -o size=20m tmpfs $D/small
smount $D/small $D/mnt --writeback-cache || exit 2
python3 - $D/mnt <<'PY'
import os, sys
os.chdir(sys.argv[1])
old=os.urandom(5<<20)
with open('keep','wb') as f: f.write(old)
new=os.urandom(30<<20)
fd=os.open('keep', os.O_WRONLY|os.O_TRUNC)
done=0
try:
    while done<len(new): done+=os.write(fd, new[done:done+(1<<20)])
except OSError as e: pass
try: os.close(fd); c='ok'
except OSError as e: c=e.strerror
try:
    with open('keep','rb') as f: b=f.read()
except OSError as e:
    print('PASS (read fails: %s)' % e.strerror); sys.exit()
if b==old: print('PASS (previous version)')
elif b==new[:done]: print('PASS? new bytes (close said %s)' % c)
elif b[:len(old)]==old and b[len(old):]==bytes(len(b)-len(old)):
    print('FAIL: after close failed (%s), file reads as %d bytes: previous version + %d zero bytes never written' % (c, len(b), len(b)-len(old)))
else: print('FAIL: file reads %d unexpected bytes' % len(b))
PY
sumount $D/mnt
umount $D/small
