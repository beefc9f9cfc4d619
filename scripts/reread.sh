#!/usr/bin/env bash
# Warm re-reads through the mount: each shrinkfs binary mounts a local-directory bucket on
# /dev/shm (zstd-1), writes SIZE bytes of DATA to one file, then reads it back with `cat` RUNS
# times without remounting (the kernel's page cache may hold it), alternating the binaries.
# Usage: scripts/reread.sh DATA SIZE RUNS LABEL=BINARY...   (root, /dev/fuse)
set -euo pipefail
data=$1 size=$2 runs=$3; shift 3
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores; data $data, $size bytes"
for r in $(seq "$runs"); do
  for lb in "$@"; do
    label=${lb%%=*} bin=${lb#*=} w=/dev/shm/reread-$label
    rm -rf "$w"; mkdir -p "$w/b" "$w/m"
    "$bin" mount "$w/b" "$w/m" --daemon --codec zstd
    head -c "$size" "$data" > "$w/m/f"
    times=()
    for k in 1 2 3; do
      s=$(date +%s.%N); cat "$w/m/f" > /dev/null; e=$(date +%s.%N)
      times+=("$(awk "BEGIN{printf \"%.3f\", $e - $s}")")
    done
    cmp -s "$w/m/f" <(head -c "$size" "$data") && same=same || same=DIFFERENT
    umount "$w/m"; rm -rf "$w"
    echo "run$r $label reads ${times[*]} s ($same)"
  done
done
