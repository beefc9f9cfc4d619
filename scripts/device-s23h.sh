#!/bin/bash
# Session 23: device-s23f.sh again without the final check, with null_fs answering from a written
# buffer per thread (.devab/nullfs.gz): the ceiling of reads through FUSE on this host beside
# shrinkfs mounts (a24af8e, .devab/new.gz) with `--codec none` and zstd-1 (`--gpu off`); 8 readers
# of 512 MiB and 1 reader of 2 GiB (its rate now computed on 2 GiB), 3 rounds in rotation, each
# null_fs's request count and mean size.
set -u
. scripts/device-setup.sh new nullfs
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
    m=$w/n$n; if [ $n = 8 ]; then /tmp/b/nullfs $m 8 512 16 2>> $w/null.log & else /tmp/b/nullfs $m 1 2048 16 2>> $w/null.log & fi; pid=$!
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
  awk -v l="$k r$n" -v s=$s -v e=$e -v ok=$ok -v g=$([ $n = 1 ] && echo 2 || echo 4) 'BEGIN{printf "%-10s %.2f GB/s ok %d\n", l, g*2^30/(e-s)/1e9, ok}'
  [ $k = null ] && tail -1 $w/null.log
}
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores; $(cat .devab/REV)"
  kinds=(null none zstd)
  for r in 0 1 2; do for j in 0 1 2; do k=${kinds[$(((j + r) % 3))]}; cold $k 8; cold $k 1; done; done
  rm -rf $w
} > $OUT/s23h.txt 2>&1
cat $OUT/s23h.txt
