#!/bin/bash
# Cold reads on the GPU host, under $OUT: builds $BINS (gzipped stripped binaries .devab/NAME.gz)
# read the same bucket (on /dev/shm, written once by the first build: 8 files of 512 MiB and one
# of 2 GiB of a tar of /usr, zstd-1, `--gpu off`) through a fresh mount after drop_caches, $REPS
# times with the builds alternated: 1 reader of the 2 GiB file, then 8 readers of the 512 MiB ones,
# with the mount's CPU-seconds per GiB read.
set -u
BINS=${BINS:-old new}
mkdir -p /tmp/b; for b in $BINS; do gunzip -c .devab/$b.gz > /tmp/b/$b; chmod +x /tmp/b/$b; done
[ -f /dev/shm/real.2g ] || tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
nproc; uname -r; date -u
w=/dev/shm/cold; rm -rf $w; mkdir -p $w/b $w/m $w/s
first=${BINS%% *}
/tmp/b/$first mount $w/b $w/m --gpu off --codec zstd --staging-dir $w/s --daemon
for i in $(seq 8); do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & done; wait
dd if=/dev/shm/real.2g of=$w/m/big bs=1M conv=fsync status=none
umount $w/m
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
for rep in $(seq ${REPS:-3}); do
  for b in $BINS; do
    for n in 1 8; do
      sync; echo 3 > /proc/sys/vm/drop_caches
      /tmp/b/$b mount $w/b $w/m --gpu off --staging-dir $w/s > $w/log 2>&1 &
      pid=$!
      for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
      grep -q " $w/m fuse" /proc/mounts || { echo "$b did not mount:"; cat $w/log; exit 1; }
      c0=$(ticks $pid); s=$(date +%s.%N)
      if [ $n = 1 ]; then dd if=$w/m/big of=/dev/null bs=1M status=none
      else for i in $(seq 8); do dd if=$w/m/f$i of=/dev/null bs=1M status=none & done; wait $(jobs -p | tail -8); fi
      e=$(date +%s.%N); c1=$(ticks $pid)
      gib=$([ $n = 1 ] && echo 2 || echo 4)
      echo "$rep $b $n reader(s): $(awk -v s=$s -v e=$e -v c=$((c1 - c0)) -v g=$gib 'BEGIN{printf "%.2f GB/s %.2f CPU-s/GiB", g*2^30/(e-s)/1e9, c/100/g}')"
      umount $w/m; wait $pid 2>/dev/null
    done
  done
done
