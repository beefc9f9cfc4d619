#!/usr/bin/env bash
# A/B of a directory rename through the mount: 1,000 files of 4 KiB in one directory on a
# local-directory bucket on /dev/shm, `mv d e` timed, each build in turn, ROUNDS rounds.
# Usage: rename-ab.sh OLD_BIN NEW_BIN [ROUNDS] [FILES]
set -euo pipefail
old=$1 new=$2 rounds=${3:-3} files=${4:-1000}
w=$(mktemp -d /dev/shm/rename-ab.XXXX)
trap 'for m in "$w"/*/mnt; do fusermount3 -u "$m" 2>/dev/null || true; done; rm -rf "$w"' EXIT
one() {
  local bin=$1 tag=$2 d="$w/$2"
  rm -rf "$d"; mkdir -p "$d/bucket" "$d/mnt"
  SHRINKFS_CONFIG= "$bin" mount "$d/bucket" "$d/mnt" --log-file "$d/log" & local pid=$!
  for _ in $(seq 100); do mountpoint -q "$d/mnt" && break; sleep 0.1; done
  mkdir "$d/mnt/d"
  python3 - "$d/mnt/d" "$files" <<'PY'
import os,sys
d,n=sys.argv[1],int(sys.argv[2])
for i in range(n):
    with open(f"{d}/f{i:05d}","wb") as f: f.write(os.urandom(4096))
PY
  local t0=$(date +%s.%N)
  mv "$d/mnt/d" "$d/mnt/e"
  local t1=$(date +%s.%N)
  local n=$(ls "$d/mnt/e" | wc -l)
  "$bin" unmount "$d/mnt" >/dev/null 2>&1 || fusermount3 -u "$d/mnt"; wait $pid || true
  printf '%-4s rename of %d files: %.3f s (%d listed after)\n' "$tag" "$files" "$(echo "$t1 - $t0" | bc)" "$n"
}
echo "old=$old new=$new rounds=$rounds files=$files $(date -u +%FT%TZ) $(nproc) cores"
for r in $(seq "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then one "$old" old; one "$new" new; else one "$new" new; one "$old" old; fi
done
