#!/bin/bash
# scripts/mount-vs-zstd.sh for several builds, rotated round by round, with a summary per build.
# Usage: BINS=DIR [DATA=FILE] scripts/mount-vs-zstd-rotate.sh OUT ROUNDS NAME...
#   each NAME is DIR/shrinkfs-NAME (a binary, or a wrapper script that sets an environment first);
#   DATA defaults to /dev/shm/real.1g (1 GiB of a tar of /usr). Root, /dev/fuse and zstd needed.
set -u
out=$1 rounds=$2; shift 2; vs=("$@"); n=${#vs[@]}
: > $out
for r in $(seq $rounds); do
  for k in $(seq 0 $((n-1))); do b=${vs[$(( (k + r) % n ))]}; echo "== $b" >> $out; "$(dirname "$0")"/mount-vs-zstd.sh "${BINS:?set BINS}/shrinkfs-$b" "${DATA:-/dev/shm/real.1g}" 1 >> $out 2>&1; done
done
grep -A2 "^==" $out | grep -E "^==|run1" | paste - - | python3 -c "
import sys,re,statistics as st
d={}
for l in sys.stdin:
    b=l.split()[1]; m=re.search(r'mount write \(zstd-1\) ([0-9.]+) s vs zstd -1 -T2 ([0-9.]+) s: ([0-9.]+)x \| cold mount read ([0-9.]+) s vs zstd -d ([0-9.]+) s: ([0-9.]+)x',l)
    if not m: continue  # a run that failed: its output is in the file
    d.setdefault(b,[]).append([float(x) for x in m.groups()])
for b,v in d.items():
    w=[x[0] for x in v]; t=[x[3] for x in v]; r=[x[5] for x in v]
    print('%-10s write mean %.3f s | read %.2f-%.2f s mean %.3f | vs zstd -d %.2f-%.2f mean %.3f, >=0.9x in %d of %d' % (b, st.mean(w), min(t),max(t),st.mean(t), min(r),max(r),st.mean(r), sum(x>=0.9 for x in r), len(r)))
"
