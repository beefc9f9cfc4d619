#!/bin/bash
# Device script (session 22, issue 15's `pack` line): an experiment build (.devab/exp.gz: c490aa1
# with a temporary patch, not committed: in `run`'s `pack` arm the dispatcher is dropped, or
# forgotten after `wait_started`, and the time logged as "dispatcher gone"; in `batch_loop` a
# `Decision::Launch` arm for one stream under `auto` when `waiting >= target`) with two switches: SHRINKFS_EXP_FORGET=1 leaves the GPU to the driver at exit instead of tearing it down,
# SHRINKFS_EXP_SHARE=1 lets `pack --gpu auto` launch whenever a full launch waits (the cores
# saturated). 4 GiB and 8 GiB of real files, idle and beside 16 busy loops.
set -u
. scripts/device-setup.sh exp
B=/tmp/b/exp
[ -f /dev/shm/real.4g ] || tar cf - /usr /opt /var /etc 2>/dev/null | head -c $((4 << 30)) > /dev/shm/real.4g
[ -f /dev/shm/real.8g ] || cat /dev/shm/real.4g /dev/shm/real.4g > /dev/shm/real.8g
one() { # label input gpu [env...]
  local label=$1 in=$2 g=$3; shift 3
  rm -f /dev/shm/o.skf
  local s e; s=$(date +%s.%N)
  env "$@" RUST_LOG=shrinkfs_codec=info,shrinkfs=debug $B pack --gpu $g /dev/shm/$in /dev/shm/o.skf > /dev/null 2> /tmp/log
  e=$(date +%s.%N)
  local enc=$(grep -m1 "frames encoded" /tmp/log | sed 's/.*ms=\([0-9]*\).*/\1/')
  local gone=$(grep -m1 "dispatcher gone" /tmp/log | sed 's/.*ms=\([0-9]*\).*/\1/')
  echo "$label $in $g: $(awk "BEGIN{printf \"%.3f\", $e - $s}") s, encode ms $enc, teardown ms $gone, stored $(stat -c %s /dev/shm/o.skf)"
}
set4() {
  one off real.4g off
  one auto real.4g auto
  one auto-forget real.4g auto SHRINKFS_EXP_FORGET=1
  one auto-share-forget real.4g auto SHRINKFS_EXP_SHARE=1 SHRINKFS_EXP_FORGET=1
  one on real.4g on
  one on-forget real.4g on SHRINKFS_EXP_FORGET=1
}
for round in 1 2; do echo "== idle round $round"; set4; done
echo "== 8 GiB idle"
for round in 1 2; do
  one off real.8g off; one auto-forget real.8g auto SHRINKFS_EXP_FORGET=1; one auto-share-forget real.8g auto SHRINKFS_EXP_SHARE=1 SHRINKFS_EXP_FORGET=1
done
/tmp/b/exp unpack /dev/shm/o.skf /dev/shm/back && cmp /dev/shm/back /dev/shm/real.8g && echo "8g auto-share round trip OK"; rm -f /dev/shm/back
echo "== busy (16 loops)"
pids=""; for i in $(seq 16); do ( while :; do :; done ) & pids="$pids $!"; done; sleep 1
for round in 1 2; do
  one off real.4g off; one auto real.4g auto; one auto-forget real.4g auto SHRINKFS_EXP_FORGET=1; one auto-share-forget real.4g auto SHRINKFS_EXP_SHARE=1 SHRINKFS_EXP_FORGET=1
done
kill $pids
RUST_LOG=shrinkfs_codec=debug SHRINKFS_EXP_SHARE=1 $B pack --gpu auto /dev/shm/real.8g /dev/shm/o.skf 2> $OUT/auto-share-8g.log > /dev/null; grep -c "compress batch" $OUT/auto-share-8g.log; gzip $OUT/auto-share-8g.log
