#!/bin/bash
# Session 28 experiment: is `pack` of a file held by its readers (4 threads reading frames at
# offsets)? The experiment build (.devab/exp.gz; EXP_READERS threads read, EXP_WINDOW frames in
# flight; neither kept) packs real.16g (device-s28d.sh) with `--gpu off` and `auto`; then a flat
# profile of one `--gpu off` pack (perf, if the host has it).
set -u
. scripts/device-setup.sh exp
B=/tmp/b/exp
[ -f /dev/shm/real.4g ] || tar cf - /usr /opt /var /etc 2>/dev/null | head -c $((4 << 30)) > /dev/shm/real.4g
[ -f /dev/shm/real.16g ] || cat /dev/shm/real.4g /dev/shm/real.4g /dev/shm/real.4g /dev/shm/real.4g > /dev/shm/real.16g
one() { # LABEL GPU INPUT [ENV...]
  local label=$1 g=$2 in=$3; shift 3
  rm -f /dev/shm/o.skf
  local TIMEFORMAT="%R %U %S" t
  t=$( { time env "$@" $B pack --gpu $g $in /dev/shm/o.skf > /dev/null 2>&1; } 2>&1 )
  set -- $t
  printf "%-34s %-9s %7.3f s  %6.2f GB/s  cpu %s + %s s  stored %d\n" "$label" ${in##*/} $1 \
    $(awk -v n=$(stat -c %s $in) "BEGIN{print n / $1 / 1e9}") $2 $3 $(stat -c %s /dev/shm/o.skf)
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV)"
  for r in 1 2; do
    one "off" off /dev/shm/real.16g
    one "off readers 8" off /dev/shm/real.16g EXP_READERS=8
    one "off readers 16 window 256" off /dev/shm/real.16g EXP_READERS=16 EXP_WINDOW=256
    one "auto" auto /dev/shm/real.16g
    one "auto readers 8" auto /dev/shm/real.16g EXP_READERS=8
    one "auto readers 16 margin 0 window 512" auto /dev/shm/real.16g EXP_READERS=16 EXP_MARGIN=0 EXP_WINDOW=512
  done
  if command -v perf > /dev/null; then
    perf record -F 499 -g -o /dev/shm/perf.data $B pack --gpu off /dev/shm/real.16g /dev/shm/o.skf > /dev/null 2>&1
    perf report -i /dev/shm/perf.data --stdio --no-children --sort comm,dso,symbol 2>/dev/null | grep -v '^$' | grep -E '^ +[0-9]' | head -60
    rm -f /dev/shm/perf.data
  else
    echo "no perf here"
  fi
  rm -f /dev/shm/o.skf
} > $OUT/s28g.txt 2>&1
cat $OUT/machine.txt $OUT/s28g.txt
