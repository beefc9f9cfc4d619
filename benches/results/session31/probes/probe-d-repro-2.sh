#!/bin/bash
# repro-2: a sealed mount stores each file's mode, uid, gid, mtime, ctime and atime in clear in the
# object's index; SEMANTICS.md says a sealed mount does not publish attributes in the clear, and
# FORMAT.md's "What is not hidden" list does not name them.
B=${B:-/work/bin-new/shrinkfs-s31base}
W=$(mktemp -d /tmp/probe31d/r2.XXXXXX); M="$W/mnt"
cleanup(){ mountpoint -q "$M" && $B unmount "$M" >/dev/null 2>&1; rm -rf "$W"; }
trap cleanup EXIT
mkdir -p "$W/bucket" "$M"; ( umask 077; head -c 32 /dev/urandom > "$W/key" )
$B mount --key-file "$W/key" "$W/bucket" "$M" 2>"$W/log" &
for i in $(seq 50); do mountpoint -q "$M" && break; sleep 0.1; done
mountpoint -q "$M" || { echo "FAIL setup: mount did not come up"; exit 1; }
echo secret > "$M/f"; chmod 4751 "$M/f"; chown 4242:4343 "$M/f"; touch -m -d '2001-02-03 04:05:06' "$M/f"
$B unmount "$M" >/dev/null 2>&1
python3 - "$W/bucket/f" "$(date -d '2001-02-03 04:05:06' +%s)" <<'PY'
import struct,sys
d=open(sys.argv[1],'rb').read()
io,il,fc,ls,icrc,ver,fl=struct.unpack_from('<QIIQIHH',d,len(d)-48)
mode,uid,gid,mf=struct.unpack_from('<IIII',d,io+72); mt,=struct.unpack_from('<q',d,io+88)
sealed=fl&1
if sealed and (mode&0o7777)==0o751 and uid==4242 and gid==4343 and mt==int(sys.argv[2]):
    print("FAIL: sealed object (flags=%d) holds in clear mode=%o uid=%d gid=%d mtime=%d (SEMANTICS.md: a sealed mount does not publish attributes in the clear)"%(fl,mode,uid,gid,mt)); sys.exit(1)
print("PASS: attributes not readable in clear from the sealed object (mode=%o uid=%d sealed=%d)"%(mode,uid,sealed))
PY
