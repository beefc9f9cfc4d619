#!/bin/bash
# Session 28: issue 15's "`auto` never more than 5% slower than `off`" for cold readers, busy and
# idle, at the session's code (.devab/new.gz, .devab/REV): 8 readers of 512 MiB (objects written
# by `--gpu off`) through a fresh mount, read 2 s after it is up, beside 16 CPU-bound loops (six
# pairs, the order alternating) and idle (two pairs); one reader of 2 GiB idle (two pairs).
set -u
. scripts/device-setup.sh new
w=/dev/shm/cold; rm -rf $w; mkdir -p $w/cpu $w/m $w/s
/tmp/b/new mount $w/cpu $w/m --gpu off --staging-dir $w/s --daemon
p=(); for i in $(seq 8); do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & p+=($!); done; wait "${p[@]}"
dd if=/dev/shm/real.2g of=$w/m/big bs=1M conv=fsync status=none
umount $w/m; sleep 1
tck=$(getconf CLK_TCK)
cold() { # GPU READERS LABEL
  local g=$1 n=$2 label=$3
  sync; echo 3 > /proc/sys/vm/drop_caches
  /tmp/b/new mount $w/cpu $w/m --gpu $g --staging-dir $w/s > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2
  local c0 s e c1 dds=() i ok=1 bytes
  c0=$(awk '{print $14 + $15}' /proc/$pid/stat); s=$(date +%s.%N)
  if [ $n = 1 ]; then
    timeout 60 dd if=$w/m/big of=/dev/null bs=1M status=none || ok=0; bytes=$((2 << 30))
  else
    for i in $(seq $n); do timeout 60 dd if=$w/m/f$i of=/dev/null bs=1M status=none & dds+=($!); done
    for i in "${dds[@]}"; do wait $i || ok=0; done; bytes=$((n << 29))
  fi
  e=$(date +%s.%N); c1=$(awk '{print $14 + $15}' /proc/$pid/stat)
  umount $w/m; wait $pid 2>/dev/null
  awk -v l="$label" -v s=$s -v e=$e -v c=$((c1 - c0)) -v ok=$ok -v b=$bytes -v tk=$tck \
    'BEGIN{printf "%-24s %.2f GB/s %.2f CPU-s/GiB read-ok %d\n", l, b/(e-s)/1e9, c/tk/(b/2^30), ok}'
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV)"
  echo "## idle"
  for r in 1 2; do cold off 8 "off r8 idle"; cold auto 8 "auto r8 idle"; cold auto 1 "auto r1 idle"; cold off 1 "off r1 idle"; done
  echo "## 16 CPU-bound loops beside"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  for r in 1 2 3; do cold off 8 "off r8 busy"; cold auto 8 "auto r8 busy"; cold auto 8 "auto r8 busy"; cold off 8 "off r8 busy"; done
  kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
} > $OUT/s28h.txt 2>&1
cat $OUT/machine.txt $OUT/s28h.txt
