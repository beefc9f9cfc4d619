#!/bin/bash
# Session 23's last device call: the final check of the session's head (.devab/new.gz, GPU tests
# .devab/gputest.gz and .devab/gpumetrics.gz), then the ceiling of reads through FUSE on this
# host: fuse/examples/null_fs.rs (.devab/nullfs.gz, files of zeros, nothing behind them, the
# mount's kernel settings, 16 threads) read cold by 8 readers of 512 MiB and 1 reader of 2 GiB,
# beside shrinkfs mounts of the same shape with `--codec none` and with zstd-1 (`--gpu off`),
# written from a tar of /usr; 3 rounds in rotation.
set -u
. scripts/device-setup.sh new gputest gpumetrics nullfs
bash scripts/device-final-check.sh > /dev/null
{ echo "== tests/gpu_metrics.rs"; timeout 120 /tmp/b/gpumetrics --include-ignored 2>&1 | tail -4; } >> $OUT/final-check.txt
w=/dev/shm/ceil; rm -rf $w; mkdir -p $w/none $w/zstd $w/m $w/s $w/n8 $w/n1
for c in none zstd; do
  /tmp/b/new mount $w/$c $w/m --gpu off --staging-dir $w/s $([ $c = none ] && echo --codec none) --daemon
  p=(); for i in $(seq 8); do dd if=/dev/shm/real.512m of=$w/m/f$i bs=1M conv=fsync status=none & p+=($!); done; wait "${p[@]}"
  dd if=/dev/shm/real.2g of=$w/m/big bs=1M conv=fsync status=none; umount $w/m
done
du -sb $w/none $w/zstd
cold() { # KIND READERS
  local k=$1 n=$2 m pid s e ok=1 dds=() i
  sync; echo 3 > /proc/sys/vm/drop_caches
  if [ $k = null ]; then
    m=$w/n$n; if [ $n = 8 ]; then /tmp/b/nullfs $m 8 512 16 & else /tmp/b/nullfs $m 1 2048 16 & fi; pid=$!
    for _ in $(seq 100); do grep -q " $m fuse" /proc/mounts && break; sleep 0.1; done
    echo 1024 > /sys/class/bdi/$(mountpoint -d $m)/read_ahead_kb
  else
    m=$w/m; /tmp/b/new mount $w/$k $m --gpu off --staging-dir $w/s > /dev/null 2>&1 & pid=$!
    for _ in $(seq 100); do grep -q " $m fuse" /proc/mounts && break; sleep 0.1; done
  fi
  sleep 1
  s=$(date +%s.%N)
  if [ $n = 1 ]; then f=$([ $k = null ] && echo f1 || echo big); timeout 60 dd if=$m/$f of=/dev/null bs=1M status=none || ok=0
  else for i in $(seq 8); do timeout 60 dd if=$m/f$i of=/dev/null bs=1M status=none & dds+=($!); done
    for i in "${dds[@]}"; do wait $i || ok=0; done; fi
  e=$(date +%s.%N); umount $m; wait $pid 2>/dev/null
  awk -v l="$k r$n" -v s=$s -v e=$e -v ok=$ok 'BEGIN{printf "%-10s %.2f GB/s ok %d\n", l, 4*2^30/(e-s)/1e9, ok}'
}
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores; $(cat .devab/REV)"
  kinds=(null none zstd)
  for r in 0 1 2; do for j in 0 1 2; do k=${kinds[$(((j + r) % 3))]}; cold $k 8; cold $k 1; done; done
  rm -rf $w
} > $OUT/s23f.txt 2>&1
cat $OUT/final-check.txt $OUT/s23f.txt
