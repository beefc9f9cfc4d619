#!/usr/bin/env bash
# The mount beside the zstd command line on the same bytes, alternated run by run: a zstd-1 mount
# over a bucket in DIR written with `dd bs=1M conv=fsync` against `zstd -1 -T$(nproc)` (then sync),
# and a cold read of the mount (drop_caches, remount) against `zstd -d`. Prints the ratios.
# Usage: scripts/mount-vs-zstd.sh SHRINKFS_BIN DATA [RUNS] [DIR]   (root, /dev/fuse, zstd)
set -euo pipefail
bin=$1 data=$2 runs=${3:-3} w=${4:-/dev/shm/mount-vs-zstd}
now() { date +%s.%N; }
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores; $bin; data $data ($(stat -c %s "$data") bytes)"
for r in $(seq "$runs"); do
  rm -rf "$w"; mkdir -p "$w/b" "$w/m"
  "$bin" mount "$w/b" "$w/m" --gpu off --codec zstd --daemon
  t0=$(now); dd if="$data" of="$w/m/f" bs=1M conv=fsync status=none; t1=$(now)
  umount "$w/m"; sleep 0.5
  t2=$(now); zstd -q -1 -T"$(nproc)" -c "$data" > "$w/z.zst"; sync; t3=$(now)
  echo 3 > /proc/sys/vm/drop_caches
  "$bin" mount "$w/b" "$w/m" --gpu off --daemon
  t4=$(now); dd if="$w/m/f" of=/dev/null bs=1M status=none; t5=$(now)
  umount "$w/m"
  t6=$(now); zstd -q -d -c "$w/z.zst" > /dev/null; t7=$(now)
  awk -v r="$r" -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v e="$t4" -v f="$t5" -v g="$t6" -v h="$t7" -v n="$(nproc)" \
    'BEGIN { printf "run%d  mount write (zstd-1) %.2f s vs zstd -1 -T%d %.2f s: %.2fx | cold mount read %.2f s vs zstd -d %.2f s: %.2fx\n", r, b-a, n, d-c, (d-c)/(b-a), f-e, h-g, (h-g)/(f-e) }'
done
rm -rf "$w"
