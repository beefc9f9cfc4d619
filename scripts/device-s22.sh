#!/bin/bash
# Device script (session 22, issue 15's `pack` line): how fast could `pack --gpu auto` be if the GPU
# and the cores each took part of one file at once? Measured with two processes: `pack --gpu on` of
# the first X GiB beside `pack --gpu off` of the rest, against one `pack --gpu off|auto|on` of all
# 4 GiB. Build .devab/base.gz. Data: the first 4 GiB of a tar of the host's files.
set -u
. scripts/device-setup.sh base
B=/tmp/b/base
[ -f /dev/shm/real.4g ] || tar cf - /usr /opt /var /etc 2>/dev/null | head -c $((4 << 30)) > /dev/shm/real.4g
ls -la /dev/shm/real.4g
t() { local s e; s=$(date +%s.%N); "$@" > /dev/null 2>&1; e=$(date +%s.%N); awk "BEGIN{printf \"%.3f\", $e - $s}"; }
one() { rm -f /dev/shm/o.skf; echo "one $1: $(t $B pack --gpu $1 /dev/shm/real.4g /dev/shm/o.skf) s stored $(stat -c %s /dev/shm/o.skf)"; }
split() { # $1 = MiB to the GPU
  local g=$1 s e
  head -c $((g << 20)) /dev/shm/real.4g > /dev/shm/g.in; tail -c +$(((g << 20) + 1)) /dev/shm/real.4g > /dev/shm/c.in
  rm -f /dev/shm/g.skf /dev/shm/c.skf
  s=$(date +%s.%N)
  ( $B pack --gpu on /dev/shm/g.in /dev/shm/g.skf > /dev/null 2>&1; echo "  gpu part done $(awk "BEGIN{printf \"%.3f\", $(date +%s.%N) - $s}")" ) &
  local gp=$!
  ( $B pack --gpu off /dev/shm/c.in /dev/shm/c.skf > /dev/null 2>&1; echo "  cpu part done $(awk "BEGIN{printf \"%.3f\", $(date +%s.%N) - $s}")" ) &
  # (Only these two: the run recorded in benches/results/session22 waited for every job, the
  # busy loops too, and hung in its busy section.)
  wait $gp $!; e=$(date +%s.%N)
  echo "split gpu=${g}MiB: $(awk "BEGIN{printf \"%.3f\", $e - $s}") s stored $(( $(stat -c %s /dev/shm/g.skf) + $(stat -c %s /dev/shm/c.skf) ))"
}
for round in 1 2; do
  echo "== round $round (idle)"
  one off; one auto; one on
  for g in 1536 2048 2560; do split $g; done
done
echo "== busy (16 loops)"
hogs=""; for i in $(seq 16); do ( while :; do :; done ) & hogs="$hogs $!"; done; sleep 1
one off; one auto; one on; split 2048; split 2560
kill $hogs
RUST_LOG=shrinkfs_codec=debug $B pack --gpu on /dev/shm/real.4g /dev/shm/o.skf 2> $OUT/on-debug.log > /dev/null; gzip $OUT/on-debug.log
