#!/usr/bin/env bash
# Checks for lost appends: two shell loops append 600 lines each to one file through a mount
# (`echo ... >> g`, an open/write/close per line), the mount is remounted and the lines counted;
# runs RUNS rounds of JOBS mounts at once (load makes races show). Before 80a793d
# fixed the race (an open's read of the object, or a lookup's HEAD, answered with the size from
# before the other process's append), 40 rounds of 6 lost lines in 14 of 240 mounts; after, none.
# Usage: scripts/append-race.sh SHRINKFS_BINARY [RUNS] [JOBS]  (root; prints a count per mount)
set -euo pipefail
bin=$(realpath "$1"); runs=${2:-12}; jobs=${3:-4}
one() {
  local w; w=$(mktemp -d /tmp/append-race.XXXXXX); mkdir -p "$w/b" "$w/m"
  SHRINKFS_CONFIG='' "$bin" mount "$w/b" "$w/m" --metadata-ttl 0 --daemon
  (cd "$w/m" && for i in $(seq 600); do echo "a $i" >> g; done) &
  (cd "$w/m" && for i in $(seq 600); do echo "b $i" >> g; done)
  wait
  umount "$w/m"
  SHRINKFS_CONFIG='' "$bin" mount "$w/b" "$w/m" --metadata-ttl 0 --daemon
  wc -l < "$w/m/g"; umount "$w/m"; rm -rf "$w"
}
for _ in $(seq "$runs"); do
  for _ in $(seq "$jobs"); do one & done
  wait
done | sort | uniq -c
