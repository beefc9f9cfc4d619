#!/bin/bash
# Device script (session 22, issue 15's `pack` line): can `pack --gpu on|auto` go faster with the
# knobs that exist? Page-locked frame buffers registered at the GPU's start
# (SHRINKFS_GPU_FRAME_BUFFERS), larger launches, more copy lanes; against `--gpu off`, 4 GiB of
# real files (and 8 GiB: the 4 twice), two rounds. Also when the GPU is up after the process starts.
set -u
. scripts/device-setup.sh base
B=/tmp/b/base
[ -f /dev/shm/real.4g ] || tar cf - /usr /opt /var /etc 2>/dev/null | head -c $((4 << 30)) > /dev/shm/real.4g
[ -f /dev/shm/real.8g ] || cat /dev/shm/real.4g /dev/shm/real.4g > /dev/shm/real.8g
one() { # label input gpu [env...] -- [flags...]
  local label=$1 in=$2 g=$3; shift 3
  local envs=() flags=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift; flags=("$@")
  rm -f /dev/shm/o.skf
  local s e; s=$(date +%s.%N)
  env "${envs[@]}" RUST_LOG=shrinkfs_codec=info,shrinkfs=debug $B pack --gpu $g "${flags[@]}" /dev/shm/$in /dev/shm/o.skf > /dev/null 2> /tmp/log
  e=$(date +%s.%N)
  local up=$(grep -m1 "GPU compression enabled" /tmp/log | cut -c12-26)
  local enc=$(grep -m1 "frames encoded" /tmp/log | sed 's/.*ms=\([0-9]*\).*/\1/')
  echo "$label $in $g: $(awk "BEGIN{printf \"%.3f\", $e - $s}") s, start $(date -u -d @$s +%H:%M:%S.%N | cut -c1-12), gpu up $up, encode ms $enc, stored $(stat -c %s /dev/shm/o.skf)"
}
for round in 1 2; do
  echo "== round $round"
  one base real.4g off
  for g in on auto; do
    one defaults real.4g $g
    one fb1024 real.4g $g SHRINKFS_GPU_FRAME_BUFFERS=1024
    one fb1024-floor512 real.4g $g SHRINKFS_GPU_FRAME_BUFFERS=1024 -- --gpu-batch-floor-bytes 512M
    one fb1024-lanes4 real.4g $g SHRINKFS_GPU_FRAME_BUFFERS=1024 SHRINKFS_GPU_LANES=4
  done
done
echo "== 8 GiB"
one base real.8g off
for g in on auto; do one defaults real.8g $g; one fb1024 real.8g $g SHRINKFS_GPU_FRAME_BUFFERS=1024; done
one base real.8g off
RUST_LOG=shrinkfs_codec=debug SHRINKFS_GPU_FRAME_BUFFERS=1024 $B pack --gpu on /dev/shm/real.4g /dev/shm/o.skf 2> $OUT/on-fb1024-debug.log > /dev/null; gzip $OUT/on-fb1024-debug.log
RUST_LOG=shrinkfs_codec=debug $B pack --gpu auto /dev/shm/real.8g /dev/shm/o.skf 2> $OUT/auto-8g-debug.log > /dev/null; gzip $OUT/auto-8g-debug.log
