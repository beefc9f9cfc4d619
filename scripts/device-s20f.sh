#!/bin/bash
# Session 20, last call on the GPU host, under $OUT: the review's mends (.devab/new.gz at
# c337f3c: a mount lends at most its budget's worth of frame buffers, only to frames a write fills
# whole). The GPU tests and round trips; how many of a `--gpu on` mount's launches staged
# nothing (8 writers, the launches' timings logged); then the end-to-end bench with 8 writers,
# --gpu off, auto and on, for the buffers off ("fb0") and at the default ("new"). (As run in
# session 20 its `wait` also waited for the mount, which runs in the foreground: fixed since.)
set -u
. scripts/device-setup.sh new gputest
printf '#!/bin/sh\nSHRINKFS_GPU_FRAME_BUFFERS=0 exec /tmp/b/new "$@"\n' > /tmp/b/fb0; chmod +x /tmp/b/fb0
bash scripts/device-final-check.sh > /dev/null
w=/dev/shm/st; rm -rf $w; mkdir -p $w/b $w/m $w/s
RUST_LOG=shrinkfs_codec=debug /tmp/b/new mount $w/b $w/m --gpu on --staging-dir $w/s 2> $w/log &
for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
ws=(); for i in 1 2 3 4 5 6 7 8; do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & ws+=($!); done; wait "${ws[@]}"
umount $w/m; sleep 1
{ echo "== --gpu on mount, 8 writers of 512 MiB: launches by staging time (0: every chunk lent)";
  grep -o "stage_us=[0-9]*" $w/log | awk -F= '{ if ($2 == 0) z++; else s++ } END { print "launches staging nothing:", z+0, " staging some:", s+0 }'; } > $OUT/mount-stage.txt
rm -rf $w
for b in fb0 new; do
  echo "== $b"
  timeout 140 scripts/gpu-e2e.sh /tmp/b/$b /dev/shm/real.2g 1 "off auto on" "8" 16 2>&1 | grep -v "^pack"
done > $OUT/gpu-e2e.txt
cat $OUT/final-check.txt $OUT/mount-stage.txt $OUT/gpu-e2e.txt
