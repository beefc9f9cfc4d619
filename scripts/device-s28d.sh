#!/bin/bash
# Session 28: issue 15's `pack` line at larger sizes. `pack --gpu off|auto|on` of the first 4 GiB
# of a tar of the host's /usr /opt /var /etc (real.4g) and of that file four times over
# (real.16g: frames are compressed one by one, so the repeat does not shrink better), in rotation,
# two rounds; wall time, the process's CPU seconds and the stored bytes; `zstd -1 -T16` beside.
# Build .devab/new.gz (.devab/REV).
set -u
. scripts/device-setup.sh new
B=/tmp/b/new
[ -f /dev/shm/real.4g ] || tar cf - /usr /opt /var /etc 2>/dev/null | head -c $((4 << 30)) > /dev/shm/real.4g
[ -f /dev/shm/real.16g ] || cat /dev/shm/real.4g /dev/shm/real.4g /dev/shm/real.4g /dev/shm/real.4g > /dev/shm/real.16g
ls -la /dev/shm/real.4g /dev/shm/real.16g
one() { # GPU INPUT
  rm -f /dev/shm/o.skf
  local TIMEFORMAT="%R %U %S" t
  t=$( { time $B pack --gpu $1 $2 /dev/shm/o.skf > /dev/null 2>&1; } 2>&1 )
  set -- $1 $2 $t
  printf "%-5s %-9s %7.3f s  %6.2f GB/s  cpu %s + %s s (user + sys)  stored %d\n" $1 ${2##*/} $3 \
    $(awk -v n=$(stat -c %s $2) "BEGIN{print n / $3 / 1e9}") $4 $5 $(stat -c %s /dev/shm/o.skf)
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV)"
  for r in 1 2; do
    for f in real.4g real.16g; do for g in off auto on; do one $g /dev/shm/$f; done; done
  done
  for f in real.4g real.16g; do
    s=$(date +%s.%N); zstd -q -1 -T16 -f /dev/shm/$f -o /dev/shm/z.zst; e=$(date +%s.%N)
    echo "zstd -1 -T16 $f: $(awk "BEGIN{printf \"%.3f\", $e - $s}") s stored $(stat -c %s /dev/shm/z.zst)"
  done
  rm -f /dev/shm/z.zst /dev/shm/o.skf
} > $OUT/s28d.txt 2>&1
cat $OUT/machine.txt $OUT/s28d.txt
