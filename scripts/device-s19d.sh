#!/bin/bash
# Session 19, fourth call on the GPU host, under $OUT: where `--gpu auto` loses 4-8% against `off`
# on an idle host with 4 writers (`scripts/gpu-e2e.sh`): 4 writers of 512 MiB of a tar of /usr
# (`dd bs=1M conv=fsync`; a quarter of what each e2e writer writes) right after the mount, as that
# bench starts, and 3 s after it (the GPU expected to have started by then), `off` and `auto`
# alternated, 3 rounds (.devab/new.gz).
set -u
. scripts/device-setup.sh new
w=/dev/shm/d; cpu() { awk '{print $14 + $15}' /proc/$1/stat; }
for r in 1 2 3; do for mode in off auto off+3s auto+3s; do
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/new mount $w/b $w/m --gpu ${mode%+3s} --staging-dir $w/s > $w/log 2>&1 & pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.05; done
  grep -q " $w/m fuse" /proc/mounts || { echo "$mode did not mount:"; cat $w/log; exit 1; }
  case $mode in *+3s) sleep 3 ;; esac
  c0=$(cpu $pid); s=$(date +%s.%N)
  for i in 1 2 3 4; do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & done; wait $(jobs -p | grep -v "^$pid$")
  e=$(date +%s.%N); c1=$(cpu $pid)
  echo "round $r $mode: $(awk -v s=$s -v e=$e -v c=$((c1 - c0)) 'BEGIN{printf "%.2f GB/s %.2f CPU-s/GiB", 4*536870912/(e-s)/1e9, c/100/2}')"
  umount $w/m; wait $pid 2>/dev/null
done; done | tee $OUT/auto-start.txt
rm -rf $w
