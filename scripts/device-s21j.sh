#!/bin/bash
# Session 21, last call: the review's mend (fe8412d: the GPU's own queue for many streams' frames,
# streams counted while they write) against 34bf6c0: the final check (GPU tests, round trips),
# `--gpu auto` with 1, 2, 4 and 8 writers of 2 GiB of a tar of /usr each beside `off`, one idle
# round and 4 and 8 writers with 16 CPU-bound loops beside; then the `bench fs` that hung at
# 721f6bd.
set -u
. scripts/device-setup.sh old new gputest
bash scripts/device-final-check.sh > /dev/null
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p21
mw() { # BIN LABEL WRITERS GPU
  local bin=$1 label=$2 n=$3 g=$4
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/$bin mount $w/b $w/m --gpu $g --staging-dir $w/s --metrics-addr 127.0.0.1:0 > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2
  local c0 t0 t1 c1 dds=() i
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do timeout 60 dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  local share; share=$(/tmp/b/$bin stats $w/m --once --json --interval 0.1 2>/dev/null | grep -o '"gpu_share":[0-9.e-]*' | cut -d: -f2)
  umount $w/m; wait $pid
  awk -v b=$bin -v l="$label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck -v sh="${share:-0}" \
    'BEGIN { gib = n / 1073741824; printf "%-4s %-18s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB share %.2f\n", b, l, t1-t0, n/(t1-t0)/1e9, c/tk/gib, sh }'
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV); 2 GiB of a tar of /usr per writer"
  for n in 1 2 4 8; do mw new "off w$n" $n off; mw old "auto w$n" $n auto; mw new "auto w$n" $n auto; done
  echo "## 16 CPU-bound loops beside"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  for n in 4 8; do mw new "off w$n busy" $n off; mw old "auto w$n busy" $n auto; mw new "auto w$n busy" $n auto; done
  kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
} > $OUT/s21j.txt 2>&1
{
  echo "## bench fs, --gpu off and --gpu auto (new) side by side"
  rm -rf $w; mkdir -p $w/boff $w/bauto $w/off $w/auto
  /tmp/b/new mount $w/boff $w/off --gpu off --daemon
  /tmp/b/new mount $w/bauto $w/auto --gpu auto --daemon
  sleep 2
  timeout 120 /tmp/b/new bench fs --target off=$w/off --target auto=$w/auto --backend off=$w/boff --backend auto=$w/bauto \
    --data-file /dev/shm/real.2g --size 1G --files 1000 --jobs 4 \
    --workloads seq-write,seq-read,small-files,ls,par-write,par-read --json $OUT/bench-fs-off-auto.json 2>&1 | grep -vE "^\s*$"
  echo "rc=$?"
  umount -l $w/off; umount -l $w/auto
} >> $OUT/s21j.txt 2>&1
cat $OUT/final-check.txt $OUT/s21j.txt
