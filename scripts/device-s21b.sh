#!/bin/bash
# Session 21, second call: are a `--gpu on` mount's writers held back by registering page-locked
# frame buffers on their own threads (cuMemHostRegister) while launches run? The same build with
# the buffers registered at the GPU's warm-up (SHRINKFS_GPU_FRAME_BUFFERS_AT_START), as now
# (registered as frames first need them) and with none; 4 and 8 writers of 2 GiB of a tar of
# /usr each, `dd bs=1M conv=fsync`, two rounds. Then one mount of each kind with the codec's
# debug log (launch sizes) and the writers' and mount threads' kernel wait points sampled.
set -u
. scripts/device-setup.sh new
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p21
mw() { # LABEL WRITERS GPU [mount args...]; env from the caller; SAMPLE=1 samples wait points
  local label=$1 n=$2 g=$3; shift 3
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/new mount $w/b $w/m --gpu $g --staging-dir $w/s --metrics-addr 127.0.0.1:0 "$@" > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2 # the GPU's start and warm-up out of the way
  local c0 t0 t1 c1 dds=() i sp=
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for i in $(seq $n); do dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  if [ "${SAMPLE:-0}" = 1 ]; then
    ( while :; do
        for p in "${dds[@]}"; do echo "dd $(cat /proc/$p/wchan 2>/dev/null)"; done
        for t in /proc/$pid/task/*; do echo "$(cat $t/comm 2>/dev/null) $(cat $t/wchan 2>/dev/null)"; done
        sleep 0.003
      done ) > $w/wchan 2>/dev/null &
    sp=$!
  fi
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  [ -n "$sp" ] && { kill $sp; wait $sp 2>/dev/null; }
  local share; share=$(/tmp/b/new stats $w/m --once --json --interval 0.1 2>/dev/null | grep -o '"gpu_share":[0-9.e-]*' | cut -d: -f2)
  umount $w/m; wait $pid
  awk -v l="$label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck -v sh="${share:-0}" \
    'BEGIN { gib = n / 1073741824; printf "%-34s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB share %.2f\n", l, t1-t0, n/(t1-t0)/1e9, c/tk/gib, sh }'
}
launches() { # the debug log's launches: how many frames went in full (>= 100) and small ones
  grep "GPU batch launching" $w/log | grep -o 'frames=[0-9]*' | cut -d= -f2 |
    awk '{ n++; f += $1; if ($1 >= 100) { big++; fb += $1 } } END { printf "  launches %d, frames %d, in launches of 100+: %d launches, %d frames\n", n, f, big, fb }'
  grep "registered at start" $w/log | sed 's/^/  /'
}
waits() { sed 's/ [0-9]*$//' $w/wchan | sort | uniq -c | sort -rn | head -14 | sed 's/^/  /'; }
round() {
  mw "off w4" 4 off
  mw "on w4 (registered on demand)" 4 on
  SHRINKFS_GPU_FRAME_BUFFERS_AT_START=767 mw "on w4 registered at start" 4 on
  SHRINKFS_GPU_FRAME_BUFFERS=0 mw "on w4 no frame buffers" 4 on
  mw "auto w4 (on demand)" 4 auto
  SHRINKFS_GPU_FRAME_BUFFERS_AT_START=767 mw "auto w4 registered at start" 4 auto
  mw "off w8" 8 off
  mw "on w8 (on demand)" 8 on
  SHRINKFS_GPU_FRAME_BUFFERS_AT_START=767 mw "on w8 registered at start" 8 on
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV 2>/dev/null); 2 GiB of a tar of /usr per writer"
  echo "## round 1"; round
  echo "## round 2"; round
  echo "## one mount each, debug log and wait points"
  RUST_LOG=shrinkfs_codec=debug SAMPLE=1 mw "on w4 (on demand)" 4 on; launches; waits
  cp $w/log $OUT/on-w4-demand.log; cp $w/wchan $OUT/on-w4-demand.wchan
  SHRINKFS_GPU_FRAME_BUFFERS_AT_START=767 RUST_LOG=shrinkfs_codec=debug SAMPLE=1 mw "on w4 registered at start" 4 on; launches; waits
  cp $w/log $OUT/on-w4-start.log; cp $w/wchan $OUT/on-w4-start.wchan
  SHRINKFS_GPU_FRAME_BUFFERS=0 RUST_LOG=shrinkfs_codec=debug SAMPLE=1 mw "on w4 no frame buffers" 4 on; launches; waits
  cp $w/log $OUT/on-w4-none.log; cp $w/wchan $OUT/on-w4-none.wchan
} > $OUT/s21b.txt 2>&1
gzip $OUT/*.log $OUT/*.wchan
cat $OUT/s21b.txt
