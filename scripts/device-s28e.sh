#!/bin/bash
# Session 28: is `pack` of real files bound by writing its object (one thread into a tmpfs file)?
# `pack --gpu off|auto|on` of real.16g (device-s28d.sh) to /dev/null and to /dev/shm, in rotation,
# two rounds; and one thread's copy of 9 GiB into a tmpfs file (dd bs=1M), for the rate one
# writer gets. Build .devab/new.gz (.devab/REV).
set -u
. scripts/device-setup.sh new
B=/tmp/b/new
[ -f /dev/shm/real.4g ] || tar cf - /usr /opt /var /etc 2>/dev/null | head -c $((4 << 30)) > /dev/shm/real.4g
[ -f /dev/shm/real.16g ] || cat /dev/shm/real.4g /dev/shm/real.4g /dev/shm/real.4g /dev/shm/real.4g > /dev/shm/real.16g
one() { # GPU INPUT OUTPUT
  rm -f /dev/shm/o.skf
  local TIMEFORMAT="%R %U %S" t
  t=$( { time $B pack --gpu $1 $2 $3 > /dev/null 2>&1; } 2>&1 )
  set -- $1 $2 $3 $t
  printf "%-5s %-9s -> %-12s %7.3f s  %6.2f GB/s  cpu %s + %s s (user + sys)\n" $1 ${2##*/} $3 $4 \
    $(awk -v n=$(stat -c %s $2) "BEGIN{print n / $4 / 1e9}") $5 $6
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV)"
  for r in 1 2; do
    for o in /dev/null /dev/shm/o.skf; do for g in off auto on; do one $g /dev/shm/real.16g $o; done; done
  done
  for r in 1 2; do
    rm -f /dev/shm/copy
    s=$(date +%s.%N); dd if=/dev/shm/real.16g of=/dev/shm/copy bs=1M count=9000 status=none; e=$(date +%s.%N)
    echo "dd 9000 MiB into a tmpfs file, one thread: $(awk "BEGIN{printf \"%.3f s %.2f GB/s\", $e - $s, 9000*1048576/($e - $s)/1e9}")"
  done
  rm -f /dev/shm/copy /dev/shm/o.skf
} > $OUT/s28e.txt 2>&1
cat $OUT/machine.txt $OUT/s28e.txt
