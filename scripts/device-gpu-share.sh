#!/bin/bash
# Issue 15 on the GPU host, under $OUT: `--gpu off/auto/on` for builds $BINS (gzipped stripped
# binaries .devab/NAME.gz; default "old new"), idle and with 16 CPU-bound loops beside ($LOADS),
# $REPS times with the builds' order alternated. Per run: a mount (bucket and staging on /dev/shm)
# written by 8 writers of 512 MiB and then 4 of 1 GiB (`dd bs=1M conv=fsync`, real files: a tar of
# /usr), with the mount's CPU-seconds (user+system) per GiB for each, and 8 cold readers of the
# first 8 files through a fresh mount; then `pack` of 4 GiB of the
# same files, wall time, CPU and stored bytes. Expects nVCOMP in .device/lib.
set -u
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
BINS=${BINS:-old new}
mkdir -p /tmp/b; for b in $BINS; do gunzip -c .devab/$b.gz > /tmp/b/$b; chmod +x /tmp/b/$b; done
[ -f /dev/shm/real.2g ] || tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g
[ -f /dev/shm/real.4g ] || cat /dev/shm/real.2g /dev/shm/real.2g > /dev/shm/real.4g
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
head -c $((1 << 30)) /dev/shm/real.2g > /dev/shm/real.1g
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; uname -r; date -u
w=/dev/shm/share
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
writers() {  # n file -> "GB/s CPU-s/GiB" of n writers of file into the mount of pid $pid
  local n=$1 f=$2 c0 c1 s e
  c0=$(ticks $pid); s=$(date +%s.%N)
  for i in $(seq $n); do dd if=$f of=$w/m/$n-$i bs=1M conv=fsync status=none & done
  wait $(jobs -p | tail -$n)
  e=$(date +%s.%N); c1=$(ticks $pid)
  awk -v b=$(( n * $(stat -c %s $f) )) -v s=$s -v e=$e -v c=$((c1 - c0)) \
    'BEGIN{printf "%.2f GB/s %.2f CPU-s/GiB", b/(e-s)/1e9, c/100/(b/2^30)}'
}
for load in ${LOADS:-idle busy}; do
  if [ $load = busy ]; then for i in $(seq 16); do ( while :; do :; done ) & done; sleep 1; fi
  for rep in $(seq ${REPS:-2}); do
    order=$BINS; [ $((rep % 2)) = 0 ] && order=$(echo $BINS | tr ' ' '\n' | tac | tr '\n' ' ')
    for b in $order; do
      for g in ${MODES:-off auto on}; do
        rm -rf $w; mkdir -p $w/b $w/m $w/s
        env ${ENVS:-X=1} /tmp/b/$b mount $w/b $w/m --gpu $g --codec zstd --staging-dir $w/s > $w/log 2>&1 &
        pid=$!
        for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
        dd if=/dev/shm/real.512m of=$w/m/warm bs=1M count=256 conv=fsync status=none; rm $w/m/warm
        echo "$load $b $g mount 8x512M: $(writers 8 /dev/shm/real.512m) | 4x1G: $(writers 4 /dev/shm/real.1g) stored=$(du -sb $w/b | cut -f1)"
        umount $w/m; wait $pid 2>/dev/null
        # Cold reads of the 8 files by 8 readers, through a fresh mount.
        /tmp/b/$b mount $w/b $w/m --gpu $g --staging-dir $w/s > $w/log 2>&1 &
        pid=$!
        for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
        sync; echo 3 > /proc/sys/vm/drop_caches
        s=$(date +%s.%N)
        for i in $(seq 8); do dd if=$w/m/8-$i of=/dev/null bs=1M status=none & done
        wait $(jobs -p | tail -8)
        e=$(date +%s.%N)
        echo "$load $b $g read 8x512M cold: $(awk -v s=$s -v e=$e 'BEGIN{printf "%.2f GB/s", 4*2^30/(e-s)/1e9}')"
        umount $w/m; wait $pid 2>/dev/null
        [ "${PACK:-1}" = 0 ] && continue
        rm -f /dev/shm/out.skf
        t=$( { /usr/bin/time -f "wall=%e user=%U sys=%S" /tmp/b/$b pack --gpu $g /dev/shm/real.4g /dev/shm/out.skf; } 2>&1 | tail -1)
        echo "$load $b $g pack 4G: $t stored=$(stat -c %s /dev/shm/out.skf)"
      done
    done
  done
  if [ $load = busy ]; then kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; fi
done
[ "${PACK:-1}" = 0 ] && exit 0
# Every byte back: a `pack` by the last build with `auto` and `on` unpacks on the CPU identical.
for g in auto on; do
  /tmp/b/${BINS##* } pack --gpu $g /dev/shm/real.4g /dev/shm/out.skf && /tmp/b/${BINS##* } unpack /dev/shm/out.skf /dev/shm/back \
    && cmp /dev/shm/back /dev/shm/real.4g && echo "ROUNDTRIP_OK pack --gpu $g, CPU unpack"
  rm -f /dev/shm/back /dev/shm/out.skf
done
