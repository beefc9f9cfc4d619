#!/bin/bash
# Session 28: where 4 writers under `--gpu auto` wait on a busy host (16 CPU-bound loops beside):
# per-thread CPU and run-queue wait of the mount (from /proc/PID/task/*/schedstat, grouped by
# thread name), the dd writers' run-queue wait, the GPU's utilisation (nvidia-smi every 100 ms)
# and the mount's frame and budget counters; `off` beside for the ratio; a few knobs tried.
# Build .devab/new.gz (see .devab/REV); data /dev/shm/real.2g as scripts/device-setup.sh makes it.
set -u
. scripts/device-setup.sh new
tck=$(getconf CLK_TCK); size=$(stat -c %s /dev/shm/real.2g); w=/dev/shm/p28
tasks() { # PID -> "name run_ns wait_ns" per thread
  for t in /proc/$1/task/*; do
    printf '%s %s\n' "$(tr ' ' _ < $t/comm)" "$(cut -d' ' -f1,2 $t/schedstat)"
  done 2>/dev/null
}
group() { # BEFORE AFTER -> per thread-name group: CPU s, wait s
  awk 'NR==FNR { b[$1" "FNR]=1; br[$1]+=$2; bw[$1]+=$3; next } { ar[$1]+=$2; aw[$1]+=$3 }
       END { for (k in ar) { g=k; sub(/-?[0-9]+$/, "", g); r[g]+=ar[k]-br[k]; wt[g]+=aw[k]-bw[k]; n[g]++ }
             for (g in r) printf "    %-22s threads %3d  cpu %6.2f s  runq-wait %6.2f s\n", g, n[g], r[g]/1e9, wt[g]/1e9 }' "$1" "$2" | sort -k5 -n -r
}
mw() { # LABEL WRITERS GPU EXTRA...
  local label=$1 n=$2 g=$3; shift 3
  rm -rf $w; mkdir -p $w/b $w/s $w/m
  /tmp/b/new mount $w/b $w/m --gpu $g --staging-dir $w/s --metrics-addr 127.0.0.1:9464 "$@" > $w/log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q " $w/m fuse" /proc/mounts && break; sleep 0.1; done
  sleep 2
  local c0 t0 t1 c1 dds=() i
  tasks $pid | sort > $w/t0
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 > $w/gpu 2>/dev/null & local smi=$!
  for i in $(seq $n); do timeout 60 dd if=/dev/shm/real.2g of=$w/m/f$i bs=1M conv=fsync status=none & dds+=($!); done
  ( while :; do for d in "${dds[@]}"; do [ -r /proc/$d/schedstat ] && echo "$d $(cut -d' ' -f1,2 /proc/$d/schedstat)"; done; sleep 0.05; done ) > $w/dd &
  local sampler=$!
  wait "${dds[@]}"
  t1=$(date +%s.%N); c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  kill $sampler $smi 2>/dev/null; wait $sampler $smi 2>/dev/null
  tasks $pid | sort > $w/t1
  { exec 3<>/dev/tcp/127.0.0.1/9464; printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; cat <&3; exec 3<&-; } | grep -E '^shrinkfs_(codec_cpu_frames|gpu_frames|gpu_batches|memory_budget_waits|gpu_fallbacks)' | tr '\n' ' ' > $w/metrics
  umount $w/m; wait $pid
  awk -v l="$label" -v n=$((size * n)) -v t0=$t0 -v t1=$t1 -v c=$((c1 - c0)) -v tk=$tck \
    'BEGIN { gib = n / 1073741824; printf "%-34s %6.2f s %6.2f GB/s %5.2f CPU-s/GiB\n", l, t1-t0, n/(t1-t0)/1e9, c/tk/gib }'
  echo "    metrics: $(cat $w/metrics)"
  awk '{ r[$1]=$2; wt[$1]=$3 } END { for (p in r) { R+=r[p]; W+=wt[p]; k++ } printf "    dd x%d: cpu %.2f s, runq-wait %.2f s\n", k, R/1e9, W/1e9 }' $w/dd
  awk '{ s+=$1; k++; if ($1 < 10) z++ } END { if (k) printf "    gpu util: mean %.0f%%, samples %d, under 10%%: %d\n", s/k, k, z }' $w/gpu
  group $w/t0 $w/t1 | head -12
}
{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $(cat .devab/REV); 16 busy loops"
  hogs=(); for i in $(seq 16); do (while :; do :; done) & hogs+=($!); done
  for r in 1 2; do
    mw "off w4 busy" 4 off
    mw "auto w4 busy" 4 auto
    mw "auto w4 busy --gpu-min-frames 8" 4 auto --gpu-min-frames 8
    mw "auto w4 busy --threads 32" 4 auto --threads 32
  done
  mw "auto w8 busy" 8 auto
  kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
  echo "# idle"
  mw "auto w4 idle" 4 auto
  mw "off w4 idle" 4 off
} > $OUT/s28a.txt 2>&1
cat $OUT/machine.txt $OUT/s28a.txt
