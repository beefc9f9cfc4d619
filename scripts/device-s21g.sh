#!/bin/bash
# Session 21, seventh call (721f6bd): one writer under `--gpu auto` against `off`, alternated four
# times (one run of the call before had auto 0.82x); what bounds 4 writers on a busy host (the
# writers' own CPU, each `dd` timed, and a `--codec none` mount as the floor); `pack` of 4 GiB
# (`off`, `auto`, `on`, two rounds); `bench fs` with a `--gpu off` and a `--gpu auto` mount side
# by side on real files (the "never more than 5% slower" line).
set -u
. scripts/device-setup.sh new
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p21
mw() { # LABEL WRITERS GPU [mount args]; DDTIME=1 prints each dd's CPU
  local label=$1 n=$2 g=$3; shift 3
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/new mount $w/b $w/m --gpu $g --staging-dir $w/s --metrics-addr 127.0.0.1:0 "$@" > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2
  local c0 t0 t1 c1 dds=() i
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do /usr/bin/time -f "%e %U %S" -o $w/dd$i dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  umount $w/m; wait $pid
  local ddcpu; ddcpu=$(cat $w/dd* | awk '{ e += $1; c += $2 + $3 } END { printf "%.2f", c / e }')
  awk -v l="$label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck -v dc="$ddcpu" \
    'BEGIN { gib = n / 1073741824; printf "%-30s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB; each dd used %s of a core\n", l, t1-t0, n/(t1-t0)/1e9, c/tk/gib, dc }'
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; 721f6bd; 2 GiB of a tar of /usr per writer"
  echo "## one writer, idle"
  for r in 1 2 3 4; do mw "off w1" 1 off; mw "auto w1" 1 auto; done
  echo "## 4 writers, 16 CPU-bound loops beside"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  for r in 1 2; do
    mw "off w4 busy" 4 off; mw "auto w4 busy" 4 auto; mw "none w4 busy (floor)" 4 off --codec none
  done
  kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
  echo "## pack of 4 GiB"
  cat /dev/shm/real.2g /dev/shm/real.2g > /dev/shm/real.4g
  for r in 1 2; do for g in off auto on; do
    /usr/bin/time -f "%e %U %S" -o $w.t /tmp/b/new pack --gpu $g /dev/shm/real.4g /dev/shm/p.skf 2>/dev/null
    read -r e u s < $w.t; echo "pack gpu=$g run$r $e s  user $u sys $s  stored $(stat -c %s /dev/shm/p.skf)"; rm -f /dev/shm/p.skf
  done; done
  rm -f /dev/shm/real.4g
} > $OUT/s21g.txt 2>&1
{
  echo "## bench fs, --gpu off and --gpu auto side by side"
  rm -rf $w; mkdir -p $w/boff $w/bauto $w/off $w/auto
  /tmp/b/new mount $w/boff $w/off --gpu off --daemon
  /tmp/b/new mount $w/bauto $w/auto --gpu auto --daemon
  sleep 2
  timeout 300 /tmp/b/new bench fs --target off=$w/off --target auto=$w/auto --backend off=$w/boff --backend auto=$w/bauto \
    --data-file /dev/shm/real.2g --size 2G --files 2000 --jobs 4 \
    --workloads seq-write,seq-read,rand-read,small-files,ls,mixed,par-write,par-read --json $OUT/bench-fs-off-auto.json 2>&1 | tail -40
  umount $w/off; umount $w/auto
} >> $OUT/s21g.txt 2>&1
cat $OUT/s21g.txt
