#!/bin/bash
# Probe on the GPU host, under $OUT: where a mount's CPU goes, by thread, with 8 zstd-1 writers of
# 512 MiB (after 256 MiB to warm it), for each `--gpu` mode in $MODES (default "off auto on"), idle
# and with 16 busy loops beside ($LOADS), $REPS times in turn. Per run: GB/s, then user and system
# CPU-seconds per GiB written for each group of threads (named threads by name, digits dropped),
# and the GPU and codec counters that moved. Expects .devab/$BIN.gz (default new) and nVCOMP in
# .device/lib.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
mkdir -p /tmp/b; for b in ${BINS:-new}; do gunzip -c .devab/$b.gz > /tmp/b/$b; chmod +x /tmp/b/$b; done
[ -f /dev/shm/real.2g ] || tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
w=/dev/shm/probe
snap() {  # pid -> "comm utime stime" per thread, clock ticks
  for t in /proc/$1/task/*; do [ -e $t/stat ] && python3 - "$t/stat" 2>/dev/null <<'PY'
import sys
s = open(sys.argv[1]).read()
comm = s[s.index("(") + 1:s.rindex(")")]
f = s[s.rindex(")") + 2:].split()
print(comm.replace(" ", "_"), f[11], f[12])
PY
  done
}
metrics() { python3 -c "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:9464/metrics').read().decode())" | grep -E "^shrinkfs_(gpu|codec)" ; }
for load in ${LOADS:-idle busy}; do
  if [ $load = busy ]; then for i in $(seq 16); do ( while :; do :; done ) & done; sleep 1; fi
  for rep in $(seq ${REPS:-2}); do
    for b in ${BINS:-new}; do
      for g in ${MODES:-off auto on}; do
        rm -rf $w; mkdir -p $w/b $w/m $w/s
        /tmp/b/$b mount $w/b $w/m --gpu $g --codec zstd --staging-dir $w/s --metrics-addr 127.0.0.1:9464 ${EXTRA:-} > $w/log 2>&1 &
        pid=$!
        for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
        dd if=/dev/shm/real.512m of=$w/m/warm bs=1M count=256 conv=fsync status=none; rm $w/m/warm
        sleep 0.5
        snap $pid > $w/t0; metrics > $w/m0
        s=$(date +%s.%N)
        for i in $(seq 8); do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & done
        wait $(jobs -p | tail -8)
        e=$(date +%s.%N)
        snap $pid > $w/t1; metrics > $w/m1
        echo "== $load $b --gpu $g rep $rep: $(awk "BEGIN{printf \"%.2f GB/s\", 4*1.073741824/($e-$s)}")"
        python3 - $w/t0 $w/t1 <<'PY'
import sys, re, collections
def read(p):
    d = {}
    for i, l in enumerate(open(p)):
        c, u, s = l.split()
        d.setdefault(c, []).append((int(u), int(s)))
    return {c: (sum(u for u, _ in v), sum(s for _, s in v), len(v)) for c, v in d.items()}
a, b = read(sys.argv[1]), read(sys.argv[2])
g = collections.defaultdict(lambda: [0, 0, 0])
for c, (u, s, n) in b.items():
    u0, s0, _ = a.get(c, (0, 0, 0))
    k = re.sub(r"[-_]?\d+$", "", c)
    g[k][0] += u - u0; g[k][1] += s - s0; g[k][2] += n
hz, gib = 100.0, 4.0
tot = [sum(v[0] for v in g.values()) / hz / gib, sum(v[1] for v in g.values()) / hz / gib]
print(f"   all threads: user {tot[0]:.2f} sys {tot[1]:.2f} CPU-s/GiB")
for k, (u, s, n) in sorted(g.items(), key=lambda kv: -(kv[1][0] + kv[1][1])):
    if u + s:
        print(f"   {k:24s} x{n:<3d} user {u / hz / gib:.2f} sys {s / hz / gib:.2f}")
PY
        diff <(sort $w/m0) <(sort $w/m1) | grep "^>" | grep -v "_bucket" | head -14
        umount $w/m; wait $pid 2>/dev/null; sleep 0.5
      done
    done
  done
  if [ $load = busy ]; then kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; fi
done
