#!/bin/bash
# Round 6's last check on the GPU host, under $OUT: df7aa4a (.devab/final.gz) against 813e781
# (.devab/old.gz), 1 writer (3 runs) and 8 writers (2 runs), then against 6be066c
# (.devab/direct.gz, before FUSE_DIRECT_IO_ALLOW_MMAP), 1 writer (3 runs).
set -u
mkdir -p /tmp/b; for v in old direct final; do gunzip -c .devab/$v.gz > /tmp/b/$v; chmod +x /tmp/b/$v; done
{ uname -a; nproc; date -u; } > $OUT/machine.txt
[ -f /dev/shm/real.2g ] || tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
export AB_VARIANTS="old new"
scripts/ab-write.sh /tmp/b/old /tmp/b/final /dev/shm/real.2g 3 "none zstd" 1 > $OUT/ab-1writer.txt 2>&1
scripts/ab-write.sh /tmp/b/old /tmp/b/final /dev/shm/real.512m 2 "none zstd" 8 > $OUT/ab-8writers.txt 2>&1
scripts/ab-write.sh /tmp/b/direct /tmp/b/final /dev/shm/real.2g 3 "none zstd" 1 > $OUT/ab-allow-mmap.txt 2>&1
