#!/bin/bash
# repro-4: on a sealed mount, stat of a sealed object whose index was tampered with succeeds and
# reports the object's stored length as the file size (open then fails EIO); expected: EIO for stat
# too (SEMANTICS.md: EIO for a corrupt object), or at least not a made-up size.
B=${B:-/work/bin-new/shrinkfs-s31base}
W=$(mktemp -d /tmp/probe31d/r4.XXXXXX); M="$W/mnt"
cleanup(){ mountpoint -q "$M" && $B unmount "$M" >/dev/null 2>&1; rm -rf "$W"; }
trap cleanup EXIT
mkdir -p "$W/bucket" "$M"; ( umask 077; head -c 32 /dev/urandom > "$W/key" )
head -c 300000 /dev/urandom | base64 > "$W/data"
$B pack --key-file "$W/key" --frame-size 64K "$W/data" "$W/bucket/f" || { echo "FAIL setup"; exit 1; }
python3 - "$W/bucket/f" <<'PY'
import struct,sys
T=[]
for i in range(256):
    c=i
    for _ in range(8): c=(c>>1)^0x82F63B78 if c&1 else c>>1
    T.append(c)
def crc(b):
    c=0xFFFFFFFF
    for x in b: c=T[(c^x)&0xFF]^(c>>8)
    return c^0xFFFFFFFF
p=sys.argv[1]; d=bytearray(open(p,'rb').read()); n=len(d)
io,il=struct.unpack_from('<QI',d,n-48)
d[io+72+4]^=0x01            # uid byte in the (authenticated) metadata block
struct.pack_into('<I',d,n-48+24,crc(bytes(d[io:io+il])))
struct.pack_into('<I',d,n-48+36,crc(bytes(d[n-48:n-12])))
open(p,'wb').write(d)
PY
$B mount --key-file "$W/key" "$W/bucket" "$M" 2>"$W/log" &
for i in $(seq 50); do mountpoint -q "$M" && break; sleep 0.1; done
mountpoint -q "$M" || { echo "FAIL setup: no mount"; exit 1; }
st=$(stat -c %s "$M/f" 2>&1); src=$?
cat "$M/f" >/dev/null 2>"$W/cat.err"; crc=$?
stored=$(stat -c %s "$W/bucket/f"); logical=$(stat -c %s "$W/data")
if [ $src -eq 0 ]; then
  echo "FAIL: stat of tampered sealed object succeeds with size $st (stored length $stored, real size $logical); cat fails: $(head -c 80 "$W/cat.err")"; exit 1
fi
echo "PASS: stat fails on the tampered object ($st)"
