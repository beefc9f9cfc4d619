#!/bin/bash
# Session 23, one device call: session 22's final head (.devab/new.gz) checked on a GPU (the GPU
# tests, `gpu_metrics`, round trips), then cold reads through fresh mounts of two buckets holding
# the same bytes: one written by `--gpu off` (each frame one zstd frame, one nVCOMP piece) and one
# by `--gpu on` (64 KiB pieces), each read with `--gpu off|auto|on`, idle and beside 16 CPU-bound
# loops (the busy pairs in both orders), printing GB/s, the mount's CPU-s per GiB and the frames
# decoded on the GPU; last, `pack` of 4 GiB of real files, `auto` against `off` in both orders.
set -u
. scripts/device-setup.sh new gputest gpumetrics
if [ "${SKIP_CHECK:-0}" != 1 ]; then
  bash scripts/device-final-check.sh > /dev/null
  { echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -4; } >> $OUT/final-check.txt
fi
w=/dev/shm/cold; rm -rf $w; mkdir -p $w/cpu $w/gpu $w/m $w/s
write() { # BUCKET GPU
  /tmp/b/new mount $w/$1 $w/m --gpu $2 --staging-dir $w/s --daemon
  local i p=(); for i in $(seq 8); do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & p+=($!); done; wait "${p[@]}"
  dd if=/dev/shm/real.2g of=$w/m/big bs=1M conv=fsync status=none
  umount $w/m
}
write cpu off; write gpu on
du -sb $w/cpu $w/gpu
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
cold() { # BUCKET GPU READERS LABEL
  local bk=$1 g=$2 n=$3 label=$4
  sync; echo 3 > /proc/sys/vm/drop_caches
  /tmp/b/new mount $w/$bk $w/m --gpu $g --staging-dir $w/s --metrics-addr 127.0.0.1:0 > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2
  local c0 s e c1 dds=() i ok=1
  c0=$(ticks $pid); s=$(date +%s.%N)
  if [ $n = 1 ]; then timeout 60 dd if=$w/m/big of=/dev/null bs=1M status=none || ok=0
  else for i in $(seq 8); do timeout 60 dd if=$w/m/f$i of=/dev/null bs=1M status=none & dds+=($!); done
    for i in "${dds[@]}"; do wait $i || ok=0; done; fi
  e=$(date +%s.%N); c1=$(ticks $pid)
  local dec; dec=$(python3 -c "
import os, urllib.request
a = os.getxattr('$w/m', 'user.shrinkfs.metrics_addr').decode()
t = urllib.request.urlopen('http://' + a + '/metrics').read().decode()
v = lambda n: sum(float(l.split()[-1]) for l in t.splitlines() if l.startswith(n))
print('%d tries %d' % (v('shrinkfs_gpu_decoded_frames_total'), v('shrinkfs_gpu_decode_tries_total')))" 2>/dev/null)
  umount $w/m; wait $pid 2>/dev/null
  awk -v l="$label" -v s=$s -v e=$e -v c=$((c1 - c0)) -v g=$([ $n = 1 ] && echo 2 || echo 4) -v d="${dec:-?}" -v ok=$ok \
    'BEGIN{printf "%-24s %.2f GB/s %.2f CPU-s/GiB gpu-decoded %s read-ok %d\n", l, g*2^30/(e-s)/1e9, c/100/g, d, ok}'
}
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores; $(cat .devab/REV)"
  for bk in cpu gpu; do
    for n in 1 8; do
      for g in off auto on; do cold $bk $g $n "$bk-written $g r$n"; done
    done
  done
  echo "## 16 CPU-bound loops beside"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  for bk in cpu gpu; do
    cold $bk off 8 "$bk-written off r8 busy"; cold $bk auto 8 "$bk-written auto r8 busy"
    cold $bk auto 8 "$bk-written auto r8 busy"; cold $bk off 8 "$bk-written off r8 busy"
    cold $bk on 8 "$bk-written on r8 busy"
    cold $bk off 1 "$bk-written off r1 busy"; cold $bk auto 1 "$bk-written auto r1 busy"
  done
  kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
  rm -rf $w
  echo "## pack 4 GiB"
  [ -f /dev/shm/real.4g ] || tar cf - /usr /opt /var /etc 2>/dev/null | head -c $((4 << 30)) > /dev/shm/real.4g
  one() { rm -f /dev/shm/o.skf; local s e; s=$(date +%s.%N); /tmp/b/new pack --gpu $1 /dev/shm/real.4g /dev/shm/o.skf > /dev/null 2>&1
    e=$(date +%s.%N); echo "pack $1: $(awk "BEGIN{printf \"%.3f\", $e - $s}") s stored $(stat -c %s /dev/shm/o.skf)"; }
  one off; one auto; one auto; one off; one off; one auto
  rm -f /dev/shm/o.skf
} > $OUT/s23.txt 2>&1
cat $OUT/final-check.txt $OUT/s23.txt 2>/dev/null
