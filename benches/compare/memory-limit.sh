#!/bin/bash
# Peak resident size of a mount writing under --memory-limit: W writers (`dd bs=1M conv=fsync`)
# of MB MiB each from DATA (a real file) into a local-directory bucket under /tmp, old and new
# binaries alternated. Prints each mount's idle and peak (VmHWM) resident size.
# Usage: benches/compare/memory-limit.sh OLD NEW DATA ROUNDS
set -u
old=$1 new=$2 data=$3 rounds=${4:-2}
one() { # BIN WRITERS MB ARGS...
  local bin=$1 w=$2 mb=$3; shift 3
  local d; d=$(mktemp -d /tmp/memlimit.XXXX); mkdir "$d/b" "$d/m"
  "$bin" mount "$d/b" "$d/m" --gpu off "$@" > "$d/log" 2>&1 &
  local pid=$!
  for _ in $(seq 50); do mountpoint -q "$d/m" && break; sleep 0.1; done
  local idle ps=() i
  idle=$(awk '/VmRSS/ {print int($2/1024)}' /proc/$pid/status)
  for i in $(seq "$w"); do dd if="$data" of="$d/m/f$i" bs=1M count="$mb" conv=fsync status=none & ps+=($!); done
  for i in "${ps[@]}"; do wait "$i"; done
  local hwm; hwm=$(awk '/VmHWM/ {print int($2/1024)}' /proc/$pid/status)
  umount "$d/m"; wait $pid; rm -rf "$d"
  printf '%-4s writers=%d x %4d MiB %-40s idle %4d MiB  peak %4d MiB\n' "$(basename "$bin")" "$w" "$mb" "$*" "$idle" "$hwm"
}
echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; old=$old new=$new data=$data"
for r in $(seq "$rounds"); do
  for cfg in "1 256 --memory-limit 32M --frame-size 8M" "8 64 --memory-limit 32M --frame-size 8M" \
             "8 128 --memory-limit 32M" "4 128 --memory-limit 64M --frame-size 4M" "1 640 --memory-limit 64M"; do
    for b in "$old" "$new"; do one "$b" $cfg; done
  done
done
