#!/bin/bash
# Session 28 experiment: is `pack` held by its window of frames in flight, and `auto` by its launch
# rule? An experiment build (.devab/exp.gz: EXP_WINDOW sets the frames in flight, EXP_MARGIN how
# much faster than the cores a launch must be measured; neither kept) packs real.16g and real.4g
# (device-s28d.sh) with `--gpu off` and `auto` at several settings, in rotation.
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
  for r in 1 2; do for f in real.16g real.4g; do
    one "off" off /dev/shm/$f
    one "off window 128" off /dev/shm/$f EXP_WINDOW=128
    one "off window 512" off /dev/shm/$f EXP_WINDOW=512
    one "auto" auto /dev/shm/$f
    one "auto margin 0" auto /dev/shm/$f EXP_MARGIN=0
    one "auto margin 0 window 512" auto /dev/shm/$f EXP_MARGIN=0 EXP_WINDOW=512
    one "auto margin 0 window 1024" auto /dev/shm/$f EXP_MARGIN=0 EXP_WINDOW=1024
    one "auto margin 1 window 512" auto /dev/shm/$f EXP_MARGIN=1 EXP_WINDOW=512
  done; done
  rm -f /dev/shm/o.skf
} > $OUT/s28f.txt 2>&1
cat $OUT/machine.txt $OUT/s28f.txt
