#!/bin/bash
# Session 21, first call on the GPU host: the final check of d4be039 (GPU tests, gpu_metrics,
# round trips), then where a `--gpu on` mount with 4 writers is held back: the same writes
# (`dd bs=1M conv=fsync` of /dev/shm/real.2g per writer) through mounts with more budget in
# flight, other launch sizes and lane counts, beside `off`, `auto` and 1 and 8 writers; two rounds in the same order.
# One mount with the codec's debug log gives each launch's size and time.
set -u
. scripts/device-setup.sh new gputest gpumetrics
bash scripts/device-final-check.sh > /dev/null
{ echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -5; } >> $OUT/final-check.txt
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p21
mw() { # LABEL WRITERS GPU [mount args...]; env from the caller
  local label=$1 n=$2 g=$3; shift 3
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/new mount $w/b $w/m --gpu $g --staging-dir $w/s --metrics-addr 127.0.0.1:0 "$@" > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2 # the GPU's start and warm-up out of the way
  local c0 t0 t1 c1 dds=() i
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  local share; share=$(/tmp/b/new stats $w/m --once --json --interval 0.1 2>/dev/null | grep -o '"gpu_share":[0-9.e-]*' | cut -d: -f2)
  umount $w/m; wait $pid
  awk -v l="$label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck -v sh="${share:-0}" \
    'BEGIN { gib = n / 1073741824; printf "%-28s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB share %.2f\n", l, t1-t0, n/(t1-t0)/1e9, c/tk/gib, sh }'
}
round() {
  mw "off w4" 4 off
  mw "on w4" 4 on
  mw "on w4 mem4G" 4 on --memory-limit 4G
  mw "on w4 batch64" 4 on --gpu-batch-max-items 64
  mw "on w4 batch256" 4 on --gpu-batch-max-items 256 --memory-limit 4G
  SHRINKFS_GPU_LANES=2 mw "on w4 lanes2" 4 on
  SHRINKFS_GPU_LANES=8 mw "on w4 lanes8" 4 on
  mw "auto w4" 4 auto
  mw "off w1" 1 off
  mw "on w1" 1 on
  mw "auto w1" 1 auto
  mw "off w8" 8 off
  mw "on w8" 8 on
  mw "on w8 mem4G" 8 on --memory-limit 4G
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; d4be039; 2 GiB of a tar of /usr per writer"
  echo "## round 1"; round
  echo "## round 2"; round
  echo "## debug log of one on w4 mount: launches"
  RUST_LOG=shrinkfs_codec=debug mw "on w4 (debug log)" 4 on
  grep -c "GPU batch launching" $w/log
  grep "GPU batch launching" $w/log | head -3
  grep "GPU batch launching" $w/log | grep -o 'frames=[0-9]*' | sort | uniq -c | sort -rn | head
} > $OUT/s21-on-w4.txt 2>&1
cp $w/log $OUT/on-w4-debug.log 2>/dev/null; gzip $OUT/on-w4-debug.log
cat $OUT/final-check.txt $OUT/s21-on-w4.txt
