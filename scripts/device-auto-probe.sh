#!/bin/bash
# Probe on the GPU host, under $OUT: where `--gpu auto` and `on` send a mount's frames with 8 zstd-1
# writers of 512 MiB (warmed by 256 MiB first): the mount's GPU and CPU counters from its metrics
# endpoint, and its GPU launch log. Expects .devab/$PROBE_BIN.gz (default final) and nVCOMP in .device/lib.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
b=${PROBE_BIN:-final}; mkdir -p /tmp/b; gunzip -c .devab/$b.gz > /tmp/b/final; chmod +x /tmp/b/final
[ -f /dev/shm/real.2g ] || tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
w=/dev/shm/probe
for load in ${PROBE_LOADS:-idle busy}; do
  if [ $load = busy ]; then for i in $(seq 16); do ( while :; do :; done ) & done; sleep 1; fi
  for g in ${PROBE_MODES:-auto on}; do
    rm -rf $w; mkdir -p $w/b $w/m $w/s
    RUST_LOG=shrinkfs_codec=debug /tmp/b/final mount $w/b $w/m --gpu $g --codec zstd --staging-dir $w/s --metrics-addr 127.0.0.1:9464 > $w/log 2>&1 &
    for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
    dd if=/dev/shm/real.512m of=$w/m/warm bs=1M count=256 conv=fsync status=none; rm $w/m/warm
    python3 -c "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:9464/metrics').read().decode())" | grep -E "^shrinkfs_(gpu|codec)" > $w/m0
    s=$(date +%s.%N)
    for i in $(seq 8); do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & done; wait $(jobs -p | tail -8)
    e=$(date +%s.%N)
    python3 -c "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:9464/metrics').read().decode())" | grep -E "^shrinkfs_(gpu|codec)" > $w/m1
    echo "== $load --gpu $g: $(awk "BEGIN{printf \"%.2f GB/s\", 4*1.073741824/($e-$s)}")"
    diff <(sort $w/m0) <(sort $w/m1) | grep "^>" | head -30
    python3 - $w/log <<'PY'
import re, sys, collections
rows = [re.sub(r"\x1b\[[0-9;]*m", "", l) for l in open(sys.argv[1], errors="replace") if "launch declined" in l]
num = lambda k, l: float(re.search(k + r"=([0-9.]+)", l).group(1))
hist = collections.Counter(int(num("waiting", l)) // 32 * 32 for l in rows)
print("declined:", len(rows), "by waiting:", sorted(hist.items()))
for l in rows[-2:]:
    print("  last: waiting", num("waiting", l), "launch_ms", num("launch_ms", l), "cpu_frame_ms", num("cpu_frame_ms", l))
PY
    echo "launches: $(grep -c 'GPU batch launching' $w/log); frames per launch: $(grep 'GPU batch launching' $w/log | grep -o 'frames=[0-9]*' | sort | uniq -c | sort -rn | head -8 | tr '\n' ' ')"
    umount $w/m; sleep 0.5
  done
  if [ $load = busy ]; then kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; fi
done
