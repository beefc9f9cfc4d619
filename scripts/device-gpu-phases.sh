#!/bin/bash
# Probe on the GPU host, under $OUT: the phases of each GPU launch (setup, staging, waits, copies
# back, collecting; the GPU's own copy and kernel times) of a mount with 8 zstd-1 writers of 512 MiB,
# per `--gpu` mode in $MODES (default "on auto"), idle and with 16 busy loops ($LOADS): medians
# and quartiles from the debug log. Expects .devab/$BIN.gz (default new) and nVCOMP in .device/lib.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
b=${BIN:-new}; mkdir -p /tmp/b; gunzip -c .devab/$b.gz > /tmp/b/$b; chmod +x /tmp/b/$b
[ -f /dev/shm/real.2g ] || tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
w=/dev/shm/probe
for load in ${LOADS:-idle busy}; do
  if [ $load = busy ]; then for i in $(seq 16); do ( while :; do :; done ) & done; sleep 1; fi
  for g in ${MODES:-on auto}; do
    rm -rf $w; mkdir -p $w/b $w/m $w/s
    RUST_LOG=shrinkfs_codec=debug /tmp/b/$b mount $w/b $w/m --gpu $g --codec zstd --staging-dir $w/s ${EXTRA:-} > $w/log 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
    dd if=/dev/shm/real.512m of=$w/m/warm bs=1M count=256 conv=fsync status=none; rm $w/m/warm
    n0=$(wc -l < $w/log)
    s=$(date +%s.%N)
    for i in $(seq 8); do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & done
    wait $(jobs -p | tail -8)
    e=$(date +%s.%N)
    echo "== $load --gpu $g: $(awk "BEGIN{printf \"%.2f GB/s\", 4*1.073741824/($e-$s)}")"
    tail -n +$((n0 + 1)) $w/log | python3 -c '
import re, sys, statistics as st
rows = []
for l in sys.stdin:
    l = re.sub(r"\x1b\[[0-9;]*m", "", l)
    if "GPU compress batch" not in l: continue
    rows.append({k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", l)})
print("launch parts:", len(rows))
for k in ["chunks", "bytes", "setup_us", "stage_us", "wait_us", "back_us", "collect_us", "gpu_h2d_ms", "gpu_kernel_ms", "gpu_d2h_ms", "total_us"]:
    v = sorted(r.get(k, 0) for r in rows)
    if v: print(f"  {k:14s} p25 {v[len(v)//4]:>10.1f}  p50 {v[len(v)//2]:>10.1f}  p75 {v[3*len(v)//4]:>10.1f}")
'
    grep -c "GPU batch launching" $w/log | sed "s/^/  launches: /"
    umount $w/m; wait $pid 2>/dev/null; sleep 0.5
  done
  if [ $load = busy ]; then kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; fi
done
