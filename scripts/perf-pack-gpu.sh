#!/bin/bash
# Device script behind BENCHMARKS.md §9 (perf of pack --gpu on): expects .devab/perf.tgz (perf and its
# libraries from a Debian 12 host) and .devab/sym.gz (the release binary with its symbols).
# Where `pack --gpu on` spends the host's CPU, idle and with 16 CPU-bound loops beside.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
mkdir -p /tmp/perf /tmp/b && tar xzf .devab/perf.tgz -C /tmp/perf && gunzip -c .devab/sym.gz > /tmp/b/sym && chmod +x /tmp/b/sym
P="env LD_LIBRARY_PATH=/tmp/perf/lib /tmp/perf/perf"
$P --version || exit 1
[ -f /dev/shm/usr2g ] || tar cf - /usr 2>/dev/null | head -c 2G > /dev/shm/usr2g
[ -f /dev/shm/usr4g ] || cat /dev/shm/usr2g /dev/shm/usr2g > /dev/shm/usr4g
rec() { local tag=$1; shift; rm -f /dev/shm/out.skf; $P record -F 1999 -o /tmp/$tag.data -- /usr/bin/time -f "$tag wall=%e user=%U sys=%S" /tmp/b/sym pack "$@" /dev/shm/usr4g /dev/shm/out.skf 2>&1 | grep wall
  $P report -i /tmp/$tag.data --stdio --no-children --sort comm,dso,sym 2>/dev/null | grep -v "^#" | grep -v "^$" | head -45 > $OUT/$tag.txt
  $P report -i /tmp/$tag.data --stdio --no-children --sort comm 2>/dev/null | grep -v "^#" | grep -v "^$" | head -20 > $OUT/$tag-threads.txt; }
rec on-idle --gpu on
rec off-idle --gpu off
for i in $(seq 16); do ( while :; do :; done ) & done
sleep 1
rec on-busy --gpu on
kill $(jobs -p) 2>/dev/null; wait 2>/dev/null
