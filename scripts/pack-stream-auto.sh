#!/bin/bash
# One-off device script as run for BENCHMARKS.md §9 ("pack as a pipeline"): expects gzipped stripped
# binaries in .devab/ (base = 704b2cd, final = b0c8602, final2 = 1319123) and nVCOMP in .device/lib.
# --gpu auto against off after the routing change (auto measured, as for mounts), with the
# one-stream build before it ("final") beside; idle and busy.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
mkdir -p /tmp/b; for v in base final final2; do gunzip -c .devab/$v.gz > /tmp/b/$v; chmod +x /tmp/b/$v; done
[ -f /dev/shm/usr2g ] || tar cf - /usr 2>/dev/null | head -c 2G > /dev/shm/usr2g
[ -f /dev/shm/usr4g ] || cat /dev/shm/usr2g /dev/shm/usr2g > /dev/shm/usr4g
[ -f /dev/shm/usr8g ] || cat /dev/shm/usr4g /dev/shm/usr4g > /dev/shm/usr8g
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u
T="/usr/bin/time -f wall=%e,user=%U,sys=%S"
r() { local f=$1; shift; rm -f /dev/shm/out.skf; echo "$f $*: $( { $T /tmp/b/$1 pack "${@:2}" /dev/shm/$f /dev/shm/out.skf; } 2>&1 | tail -1) stored=$(stat -c %s /dev/shm/out.skf)"; }
echo "== idle"
for rep in 1 2 3; do r usr4g final2 --gpu off; r usr4g final2 --gpu auto; r usr4g base --gpu off; r usr4g base --gpu auto; r usr4g final2 --gpu on; done
for rep in 1 2; do r usr8g final2 --gpu off; r usr8g final2 --gpu auto; r usr8g base --gpu auto; done
echo "== busy: 16 CPU-bound loops beside"
for i in $(seq 16); do ( while :; do :; done ) & done
sleep 1
for rep in 1 2 3; do r usr4g final2 --gpu off; r usr4g final2 --gpu auto; r usr4g final --gpu auto; r usr4g base --gpu auto; r usr4g final2 --gpu on; done
kill $(jobs -p) 2>/dev/null; wait 2>/dev/null
