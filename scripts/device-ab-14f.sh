#!/bin/bash
# One device call, as run for BENCHMARKS.md §5 round 6: expects gzipped stripped binaries in
# .devab/ (old.gz, new.gz; gputest.gz = codec/tests/gpu.rs of new) and nVCOMP in .device/lib.
# Writes everything under $OUT.
# The mount's writers and readers old against new (scripts/ab-write.sh), `pack` old against new
# (--gpu off/on), and the GPU tests.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
mkdir -p /tmp/b; for v in old new gputest; do gunzip -c .devab/$v.gz > /tmp/b/$v; chmod +x /tmp/b/$v; done
{ uname -a; nproc; grep -m1 'model name' /proc/cpuinfo; free -g | head -2; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > $OUT/machine.txt
echo "== GPU tests" > $OUT/gpu-tests.txt; /tmp/b/gputest --include-ignored >> $OUT/gpu-tests.txt 2>&1; tail -3 $OUT/gpu-tests.txt
[ -f /dev/shm/real.2g ] || { tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g; }
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
export AB_VARIANTS="old new"
scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.2g 3 "none zstd" 1 > $OUT/ab-1writer.txt 2>&1
scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.512m 2 "none zstd" 8 > $OUT/ab-8writers.txt 2>&1
AB_BUCKET=memory scripts/ab-write.sh /tmp/b/old /tmp/b/new /dev/shm/real.2g 2 none 1 > $OUT/ab-memory-floor.txt 2>&1
rm -rf /dev/shm/ab
cat /dev/shm/real.2g /dev/shm/real.2g > /dev/shm/usr4g
T="/usr/bin/time -f wall=%e,user=%U,sys=%S"
r() { rm -f /dev/shm/out.skf; echo "usr4g $1 --gpu $2: $( { $T /tmp/b/$1 pack --gpu $2 /dev/shm/usr4g /dev/shm/out.skf; } 2>&1 | tail -1) stored=$(stat -c %s /dev/shm/out.skf)"; }
for rep in 1 2 3; do for v in old new; do for g in off on; do r $v $g; done; done; done > $OUT/pack-ab.txt 2>&1
/tmp/b/new pack --gpu on /dev/shm/usr4g /dev/shm/out.skf && /tmp/b/new unpack /dev/shm/out.skf /dev/shm/back && cmp /dev/shm/back /dev/shm/usr4g && echo "ROUNDTRIP_OK (4 GiB, --gpu on, CPU unpack)" >> $OUT/pack-ab.txt
rm -f /dev/shm/back /dev/shm/out.skf /dev/shm/usr4g
# (perf profile: run .devab/perfw.sh in a call of its own; the carry limit is 64 MiB)
cat $OUT/*.txt | grep -v "^#" | tail -80
