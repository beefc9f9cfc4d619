#!/usr/bin/env bash
# A/B of the mount's data path: two shrinkfs binaries, alternated run by run. Each run mounts a
# local-directory bucket, starts W writers (`dd bs=1M conv=fsync`, each writing DATA to its own
# file), then unmounts, drops caches, remounts and reads the W files back with W readers.
# Prints aggregate throughput and the mount process's CPU seconds per GiB moved.
# Usage: scripts/ab-write.sh OLD_BIN NEW_BIN DATA [RUNS] [CODECS] [WRITERS]
#   e.g. scripts/ab-write.sh old/shrinkfs new/shrinkfs /dev/shm/real.1g 3 "none zstd" "1 8"
# Needs root and /dev/fuse; AB_DIR (default /dev/shm/ab) holds bucket, staging and mount point.
# AB_VARIANTS (default "old new") may add "old+wb" and "new+wb": that binary with --writeback-cache.
# AB_GPU (default off) is the mounts' --gpu; AB_WARM=1 writes 256 MiB through each mount (and
# removes it) before the timed writes. AB_AFTER_WARM is a command run then (after the warm-up, if
# any), with the mount's process id in $pid: for experiments such as renicing its threads.
# AB_BUCKET=memory mounts memory:// instead (the floor: no bucket writes; reads then come from
# the same mount after a drop of the kernel's caches, so they are not cold).
set -euo pipefail
old=$1 new=$2 data=$3 runs=${4:-3} codecs=${5:-none zstd} writers=${6:-1}
variants=${AB_VARIANTS:-old new}
work=${AB_DIR:-/dev/shm/ab}; bucket=$work/bucket staging=$work/staging mnt=$work/mnt
tck=$(getconf CLK_TCK); size=$(stat -c %s "$data")
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
now() { date +%s.%N; }
mount_fs() {  # BIN CODEC [FLAGS...]
  local bin=$1 codec=$2 src=$bucket; shift 2
  mkdir -p "$bucket" "$staging" "$mnt"
  [ "${AB_BUCKET:-}" = memory ] && src=memory://
  "$bin" mount "$src" "$mnt" --gpu "${AB_GPU:-off}" --staging-dir "$staging" --codec "$codec" "$@" >"$work/mount.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    if grep -q " $mnt fuse" /proc/mounts; then
      # AB_BDI="max_ratio=50 strict_limit=0": settings of the mount's bdi, for experiments (set
      # once the mount has set its own readahead, and shown on stderr).
      if [ -n "${AB_BDI:-}" ]; then
        sleep 0.3
        for kv in $AB_BDI; do
          f="/sys/class/bdi/$(mountpoint -d "$mnt")/${kv%%=*}"; echo "${kv#*=}" > "$f"; echo "  bdi $f = $(cat "$f")" >&2
        done
      fi
      return 0
    fi
    sleep 0.1
  done
  cat "$work/mount.log"; return 1
}
many() {  # W copies of a dd command at once; $1 = "write" or "read"
  local i; for i in $(seq "$w"); do
    if [ "$1" = write ]; then dd if="$data" of="$mnt/f$i" bs=1M conv=fsync status=none &
    else dd if="$mnt/f$i" of=/dev/null bs=1M status=none & fi
  done; wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
}
mkdir -p "$work"
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores; data $data ($size bytes)"
echo "# old $old, new $new"
for codec in $codecs; do for w in $writers; do for r in $(seq "$runs"); do for which in $variants; do
  case $which in
    old) bin=$old flags=() ;;
    new) bin=$new flags=() ;;
    old+wb) bin=$old flags=(--writeback-cache) ;;
    new+wb) bin=$new flags=(--writeback-cache) ;;
    *) echo "unknown variant $which" >&2; exit 2 ;;
  esac
  rm -rf "$bucket"; mount_fs "$bin" "$codec" "${flags[@]}"
  if [ -n "${AB_WARM:-}" ]; then  # a mount that has written before (its GPU, if any, started)
    dd if="$data" of="$mnt/warm" bs=1M count=256 conv=fsync status=none; rm "$mnt/warm"
  fi
  [ -n "${AB_AFTER_WARM:-}" ] && eval "$AB_AFTER_WARM"
  c0=$(cpu $pid); t0=$(now); many write; t1=$(now); c1=$(cpu $pid)
  if [ "${AB_BUCKET:-}" != memory ]; then
    umount "$mnt"; wait $pid || true
    sync; echo 3 > /proc/sys/vm/drop_caches; mount_fs "$bin" "$codec" "${flags[@]}"
  else
    sync; echo 3 > /proc/sys/vm/drop_caches
  fi
  c2=$(cpu $pid); t2=$(now); many read; t3=$(now); c3=$(cpu $pid)
  umount "$mnt"; wait $pid || true
  awk -v who="$which" -v c="$codec" -v w="$w" -v r="$r" -v n="$(( size * w ))" -v tk="$tck" \
    -v t0="$t0" -v t1="$t1" -v t2="$t2" -v t3="$t3" -v cw="$((c1 - c0))" -v cr="$((c3 - c2))" \
    'BEGIN { g = n / 1073741824; tw = t1 - t0; tr = t3 - t2; printf "%-6s codec=%-4s writers=%-2d run%d  write %6.2f GB/s %5.2f CPU-s/GiB | cold read %6.2f GB/s %5.2f CPU-s/GiB\n", who, c, w, r, n/tw/1e9, cw/tk/g, n/tr/1e9, cr/tk/g }'
done; done; done; done
rm -rf "$work"
