#!/usr/bin/env bash
# Reproduces a lost append (issue found 2026-11-26, open): two shell loops append 600 lines each
# to one file through a mount (`echo ... >> g`, an open/write/close per line), the mount is
# remounted and the lines counted; runs RUNS rounds of JOBS mounts at once (load makes it show).
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
