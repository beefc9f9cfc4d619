#!/bin/bash
# Session 21, sixth call: the final check of 721f6bd (GPU tests, gpu_metrics, round trips), then
# old (66f51d9) against new (721f6bd: a mount's streaming files to the GPU alone under `--gpu
# auto`) for 1, 2, 4 and 8 writers of 2 GiB of a tar of /usr each (`dd bs=1M conv=fsync`), two
# idle rounds in opposite orders and one with 16 CPU-bound loops beside; a probe with the mount's
# FUSE and runtime threads reniced to -10 from outside on the busy host.
set -u
. scripts/device-setup.sh old new gputest gpumetrics
bash scripts/device-final-check.sh > /dev/null
{ echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -5; } >> $OUT/final-check.txt
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p21
mw() { # BIN LABEL WRITERS GPU [mount args]; RENICE=1 renices the FUSE and tokio threads
  local bin=$1 label=$2 n=$3 g=$4; shift 4
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/$bin mount $w/b $w/m --gpu $g --staging-dir $w/s --metrics-addr 127.0.0.1:0 "$@" > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2 # the GPU's start and warm-up out of the way
  if [ "${RENICE:-0}" = 1 ]; then
    for t in /proc/$pid/task/*; do case "$(cat $t/comm)" in fuser*|fuse-*|tokio*) renice -n -10 -p "${t##*/}" > /dev/null;; esac; done
  fi
  local c0 t0 t1 c1 dds=() i
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  local share; share=$(/tmp/b/$bin stats $w/m --once --json --interval 0.1 2>/dev/null | grep -o '"gpu_share":[0-9.e-]*' | cut -d: -f2)
  umount $w/m; wait $pid
  awk -v b=$bin -v l="$label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck -v sh="${share:-0}" \
    'BEGIN { gib = n / 1073741824; printf "%-4s %-26s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB share %.2f\n", b, l, t1-t0, n/(t1-t0)/1e9, c/tk/gib, sh }'
}
round() { # WRITER-COUNTS SUFFIX
  for n in $1; do
    mw new "off w$n$2" $n off
    mw old "auto w$n$2" $n auto
    mw new "auto w$n$2" $n auto
    mw new "on w$n$2" $n on
  done
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV); 2 GiB of a tar of /usr per writer"
  echo "## idle round 1"; round "1 2 4 8" ""
  echo "## idle round 2"; round "8 4 2 1" ""
  echo "## 16 CPU-bound loops beside"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  round "4 8" " busy"
  RENICE=1 mw new "auto w4 busy, FUSE -10" 4 auto
  RENICE=1 mw new "off w4 busy, FUSE -10" 4 off
  kill "${hogs[@]}"
} > $OUT/s21f.txt 2>&1
cat $OUT/final-check.txt $OUT/s21f.txt
