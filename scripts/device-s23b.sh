#!/bin/bash
# Session 23: is `auto`'s loss to `off` with 8 cold readers beside 16 CPU-bound loops (0.93-0.95x,
# device-s23.sh) the GPU's start and warm-up overlapping the reads? Cold reads of 8 x 512 MiB
# (written by `--gpu off`) through a fresh mount, read 2 s after it is up (as before) or 10 s after;
# and a build (.devab/late.gz) whose GPU thread starts and warms up at the default priority, taking
# its raised one (launch_nice) only once warm. Then busy and idle writes, 4 and 8 writers of 2 GiB,
# `auto` of both builds against `off`, since the writes meet the same start.
set -u
. scripts/device-setup.sh new late
w=/dev/shm/cold; rm -rf $w; mkdir -p $w/cpu $w/m $w/s
/tmp/b/new mount $w/cpu $w/m --gpu off --staging-dir $w/s --daemon
p=(); for i in $(seq 8); do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & p+=($!); done; wait "${p[@]}"
umount $w/m
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
cold() { # BIN GPU SLEEP LABEL
  local b=$1 g=$2 z=$3 label=$4
  sync; echo 3 > /proc/sys/vm/drop_caches
  /tmp/b/$b mount $w/cpu $w/m --gpu $g --staging-dir $w/s > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep $z
  local c0 s e c1 dds=() i ok=1
  c0=$(ticks $pid); s=$(date +%s.%N)
  for i in $(seq 8); do timeout 60 dd if=$w/m/f$i of=/dev/null bs=1M status=none & dds+=($!); done
  for i in "${dds[@]}"; do wait $i || ok=0; done
  e=$(date +%s.%N); c1=$(ticks $pid)
  umount $w/m; wait $pid 2>/dev/null
  awk -v l="$label" -v s=$s -v e=$e -v c=$((c1 - c0)) -v ok=$ok \
    'BEGIN{printf "%-26s %.2f GB/s %.2f CPU-s/GiB read-ok %d\n", l, 4*2^30/(e-s)/1e9, c/100/4, ok}'
}
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); v=/dev/shm/p23
mw() { # BIN LABEL WRITERS GPU
  local bin=$1 label=$2 n=$3 g=$4
  rm -rf $v; mkdir -p $v/b $v/s $v/m
  /tmp/b/$bin mount $v/b $v/m --gpu $g --staging-dir $v/s --metrics-addr 127.0.0.1:0 > $v/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $v/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2
  local c0 t0 t1 c1 dds=() i
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do timeout 60 dd if=/dev/shm/real.2g of=$v/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  local share; share=$(/tmp/b/$bin stats $v/m --once --json --interval 0.1 2>/dev/null | grep -o '"gpu_share":[0-9.e-]*' | cut -d: -f2)
  umount $v/m; wait $pid
  awk -v b=$bin -v l="$label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck -v sh="${share:-0}" \
    'BEGIN { gib = n / 1073741824; printf "%-4s %-18s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB share %.2f\n", b, l, t1-t0, n/(t1-t0)/1e9, c/tk/gib, sh }'
}
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores; $(cat .devab/REV)"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  echo "## 8 cold readers, 16 CPU-bound loops beside"
  runs=("new off 2 new-off-2s" "new auto 2 new-auto-2s" "late auto 2 late-auto-2s" "new auto 10 new-auto-10s" "new off 10 new-off-10s")
  for r in 0 1 2; do
    for k in $(seq 0 4); do set -- ${runs[$(((k + r) % 5))]}; cold $1 $2 $3 "$4"; done
  done
  echo "## writes, 16 CPU-bound loops beside"
  for n in 4 8; do mw new "off w$n busy" $n off; mw new "auto w$n busy" $n auto; mw late "auto w$n busy" $n auto; done
  mw late "auto w4 busy" 4 auto; mw new "auto w4 busy" 4 auto; mw new "off w4 busy" 4 off
  kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
  echo "## writes, idle"
  for n in 4 8; do mw new "off w$n" $n off; mw new "auto w$n" $n auto; mw late "auto w$n" $n auto; done
  rm -rf $w $v
} > $OUT/s23b.txt 2>&1
cat $OUT/s23b.txt
