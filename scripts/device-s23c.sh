#!/bin/bash
# Session 23: the GPU back end's device and page-locked buffers and its events on cudarc's safe
# types (.devab/new.gz) against the build before (841c73b, .devab/base.gz): the final check (GPU
# tests, `gpu_metrics`, round trips) of new, a debug-logged `pack --gpu on` (the timing events)
# unpacked on the CPU, then A/B: `bench codecs` GPU rows on real files, `pack --gpu on` of 2 GiB,
# `--gpu auto` mounts with 4 and 8 writers, and 8 cold readers decoding GPU-written objects with
# `--gpu on`.
set -u
. scripts/device-setup.sh base new gputest gpumetrics
bash scripts/device-final-check.sh > /dev/null
{ echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -4
  RUST_LOG=shrinkfs_codec=debug /tmp/b/new pack --gpu on /dev/shm/real.512m /dev/shm/d.skf 2> /tmp/dbg.log > /dev/null
  /tmp/b/new unpack /dev/shm/d.skf /dev/shm/d.out && cmp /dev/shm/real.512m /dev/shm/d.out && echo "DEBUG_PACK_ROUNDTRIP_OK"
  echo "launches logged: $(grep -c 'GPU compress batch' /tmp/dbg.log)"; grep -m2 'GPU compress batch' /tmp/dbg.log
  rm -f /dev/shm/d.skf /dev/shm/d.out; } >> $OUT/final-check.txt 2>&1
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores; $(cat .devab/REV)"
  echo "## bench codecs (logs corpus and 1 GiB of a tar of /usr, 1 MiB frames, zstd)"
  for b in base new new base; do echo "-- $b"
    timeout 80 /tmp/b/$b bench codecs --corpora logs --input /dev/shm/real.2g --size 1G --frame-sizes 1M --codecs zstd --runs 2 2>&1 | grep -E "gpu|cpu-zstd-1|cores"; done
  echo "## pack --gpu on, 2 GiB"
  for b in base new new base base new; do rm -f /dev/shm/o.skf; s=$(date +%s.%N); /tmp/b/$b pack --gpu on /dev/shm/real.2g /dev/shm/o.skf > /dev/null 2>&1
    e=$(date +%s.%N); echo "$b: $(awk "BEGIN{printf \"%.3f\", $e - $s}") s stored $(stat -c %s /dev/shm/o.skf)"; done; rm -f /dev/shm/o.skf
  tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); v=/dev/shm/p23
  mw() { # BIN WRITERS
    local bin=$1 n=$2; rm -rf $v; mkdir -p $v/b $v/s $v/m
    /tmp/b/$bin mount $v/b $v/m --gpu auto --staging-dir $v/s > $v/log 2>&1 &
    local pid=$!; for _ in $(seq 100); do grep -q " $v/m fuse" /proc/mounts && break; sleep 0.1; done; sleep 2
    local c0 t0 t1 c1 dds=() i
    c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
    for i in $(seq $n); do timeout 60 dd if=/dev/shm/real.2g of=$v/m/f$i bs=1M conv=fsync status=none & dds+=($!); done; wait "${dds[@]}"
    t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat); umount $v/m; wait $pid
    awk -v b=$bin -v n=$((size * n)) -v w=$n -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck \
      'BEGIN { printf "%-4s auto w%d %6.2f GB/s %5.2f CPU-s/GiB\n", b, w, n/(t1-t0)/1e9, c/tk/(n/1073741824) }'
  }
  echo "## mount, --gpu auto, 2 GiB per writer"
  for n in 4 8; do mw base $n; mw new $n; mw new $n; mw base $n; done
  echo "## 8 cold readers, GPU-written objects, --gpu on"
  w=/dev/shm/cold; rm -rf $w; mkdir -p $w/b $w/m $w/s
  /tmp/b/base mount $w/b $w/m --gpu on --staging-dir $w/s --daemon
  p=(); for i in $(seq 8); do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & p+=($!); done; wait "${p[@]}"; umount $w/m
  for b in base new new base; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    /tmp/b/$b mount $w/b $w/m --gpu on --staging-dir $w/s --daemon; sleep 2
    s=$(date +%s.%N); ok=1; p=(); for i in $(seq 8); do cmp -s /dev/shm/real.512m $w/m/f$i & p+=($!); done
    for i in "${p[@]}"; do wait $i || ok=0; done; e=$(date +%s.%N); umount $w/m
    echo "$b on r8: $(awk "BEGIN{printf \"%.2f\", 4*2^30/($e - $s)/1e9}") GB/s (cmp against the source) identical=$ok"
  done
  rm -rf $w $v
} > $OUT/s23c.txt 2>&1
cat $OUT/final-check.txt $OUT/s23c.txt
