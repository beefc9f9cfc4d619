#!/bin/bash
# One-off device script as run for BENCHMARKS.md §9 ("pack as a pipeline"): expects gzipped stripped
# binaries in .devab/ (base = 704b2cd, final = b0c8602, final2 = 1319123) and nVCOMP in .device/lib.
# pack of real files (a tar of /usr), 704b2cd ("base") against b0c8602 ("final"), --gpu off/auto/on,
# idle and with 16 CPU-bound loops beside; then the GPU tests.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
mkdir -p /tmp/b; for v in base final gputest; do gunzip -c .devab/$v.gz > /tmp/b/$v; chmod +x /tmp/b/$v; done
echo "== GPU tests"; /tmp/b/gputest --include-ignored 2>&1 | tail -6
[ -f /dev/shm/usr2g ] || tar cf - /usr 2>/dev/null | head -c 2G > /dev/shm/usr2g
[ -f /dev/shm/usr4g ] || cat /dev/shm/usr2g /dev/shm/usr2g > /dev/shm/usr4g
[ -f /dev/shm/usr8g ] || cat /dev/shm/usr4g /dev/shm/usr4g > /dev/shm/usr8g
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; uname -r; date -u
T="/usr/bin/time -f wall=%e,user=%U,sys=%S"
r() { local f=$1; shift; rm -f /dev/shm/out.skf; echo "$f $*: $( { $T /tmp/b/$1 pack "${@:2}" /dev/shm/$f /dev/shm/out.skf; } 2>&1 | tail -1) stored=$(stat -c %s /dev/shm/out.skf)"; }
echo "== idle"
for rep in 1 2 3; do
  if [ $((rep % 2)) = 1 ]; then order="base final"; else order="final base"; fi
  for v in $order; do for g in off auto on; do r usr4g $v --gpu $g; done; done
done
for rep in 1 2; do for v in base final; do for g in off auto on; do r usr8g $v --gpu $g; done; done; done
echo "== busy: 16 CPU-bound loops beside"
for i in $(seq 16); do ( while :; do :; done ) & done
sleep 1
for rep in 1 2; do for v in base final; do for g in off auto on; do r usr4g $v --gpu $g; done; done; done
kill $(jobs -p) 2>/dev/null; wait 2>/dev/null
/tmp/b/final pack --gpu on /dev/shm/usr8g /dev/shm/out.skf && /tmp/b/final unpack /dev/shm/out.skf /dev/shm/back && cmp /dev/shm/back /dev/shm/usr8g && echo "ROUNDTRIP_OK (8 GiB, --gpu on, CPU unpack)"
