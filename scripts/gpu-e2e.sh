#!/usr/bin/env bash
# End to end, GPU against CPU (issue 15): `pack` of DATA and a mount with W writers (each writing
# DATA to its own file, `dd bs=1M conv=fsync`), then W cold readers of those files after a
# remount and a drop of the kernel's caches, for each --gpu policy, on an
# idle host and with BUSY CPU-bound processes beside it. Prints wall time, MB/s, the shrinkfs
# process's CPU-seconds per GiB (user+system) and stored bytes. Bucket and staging on /dev/shm.
# Usage (root, /dev/fuse): scripts/gpu-e2e.sh BIN DATA [RUNS] [POLICIES] [WRITERS] [BUSY]
#   e.g. scripts/gpu-e2e.sh target/release/shrinkfs /dev/shm/real.2g 2 "off auto on" "4 8" 16
set -euo pipefail
bin=$1 data=$2 runs=${3:-2} policies=${4:-off auto on} writers=${5:-4 8} busy=${6:-16}
work=${E2E_DIR:-/dev/shm/e2e}; tck=$(getconf CLK_TCK); size=$(stat -c %s "$data")
now() { date +%s.%N; }
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hogs=()
start_busy() { local i; for i in $(seq "$busy"); do (while :; do :; done) & hogs+=($!); done; }
stop_busy() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null; wait "${hogs[@]}" 2>/dev/null || true; hogs=(); }
trap 'stop_busy; umount "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores; $bin; data $data ($size bytes); busy=$busy"
for load in idle busy; do
  [ "$load" = busy ] && start_busy
  for r in $(seq "$runs"); do for g in $policies; do
    rm -rf "$work"; mkdir -p "$work"
    /usr/bin/time -f "%e %U %S" -o "$work/t" "$bin" pack --gpu "$g" "$data" "$work/p" 2>/dev/null
    read -r e u s < "$work/t"
    awk -v g="$g" -v l="$load" -v r="$r" -v e="$e" -v u="$u" -v s="$s" -v n="$size" -v st="$(stat -c %s "$work/p")" \
      'BEGIN { gib = n / 1073741824; printf "pack   gpu=%-4s %-4s run%d  %6.2f s %7.0f MB/s  %5.2f CPU-s/GiB (user %.2f sys %.2f)  stored %d\n", g, l, r, e, n/e/1e6, (u+s)/gib, u/gib, s/gib, st }'
  done; done
  for w in $writers; do for r in $(seq "$runs"); do for g in $policies; do
    rm -rf "$work"; mkdir -p "$work/b" "$work/s" "$work/mnt"
    "$bin" mount "$work/b" "$work/mnt" --gpu "$g" --staging-dir "$work/s" --metrics-addr 127.0.0.1:0 >"$work/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q " $work/mnt fuse" /proc/mounts && break; sleep 0.1; done
    c0=$(cpu_of $pid); t0=$(now)
    dds=(); for i in $(seq "$w"); do dd if="$data" of="$work/mnt/f$i" bs=1M conv=fsync status=none & dds+=($!); done
    wait "${dds[@]}"
    t1=$(now); c1=$(cpu_of $pid)
    share=$("$bin" stats "$work/mnt" --once --json --interval 0.1 2>/dev/null | grep -o '"gpu_share":[0-9.e-]*' | cut -d: -f2)
    umount "$work/mnt"; wait $pid || true
    stored=$(du -sb "$work/b" | cut -f1)
    awk -v g="$g" -v l="$load" -v w="$w" -v r="$r" -v t0="$t0" -v t1="$t1" -v c="$((c1 - c0))" -v tk="$tck" -v n="$((size * w))" -v st="$stored" -v sh="${share:-0}" \
      'BEGIN { gib = n / 1073741824; printf "mount  gpu=%-4s %-4s writers=%d run%d  %6.2f s %7.0f MB/s  %5.2f CPU-s/GiB  stored %d  GPU share %.2f\n", g, l, w, r, t1-t0, n/(t1-t0)/1e6, c/tk/gib, st, sh }'
    # Cold readers: the same files read back after a remount and a drop of the kernel's caches.
    sync; echo 3 > /proc/sys/vm/drop_caches
    "$bin" mount "$work/b" "$work/mnt" --gpu "$g" >"$work/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q " $work/mnt fuse" /proc/mounts && break; sleep 0.1; done
    c0=$(cpu_of $pid); t0=$(now)
    dds=(); for i in $(seq "$w"); do dd if="$work/mnt/f$i" of=/dev/null bs=1M status=none & dds+=($!); done
    wait "${dds[@]}"
    t1=$(now); c1=$(cpu_of $pid)
    umount "$work/mnt"; wait $pid || true
    awk -v g="$g" -v l="$load" -v w="$w" -v r="$r" -v t0="$t0" -v t1="$t1" -v c="$((c1 - c0))" -v tk="$tck" -v n="$((size * w))" \
      'BEGIN { gib = n / 1073741824; printf "read   gpu=%-4s %-4s readers=%d run%d  %6.2f s %7.0f MB/s  %5.2f CPU-s/GiB\n", g, l, w, r, t1-t0, n/(t1-t0)/1e6, c/tk/gib }'
  done; done; done
  stop_busy
done
