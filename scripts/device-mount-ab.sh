#!/usr/bin/env bash
# The mount's data path on the GPU host, old against new (issue 14): real files (a tar of /usr),
# 1 writer of 2 GiB and 8 writers of 512 MiB each, `--codec none` and zstd-1, `--gpu off`, bucket
# and staging on /dev/shm; then the in-memory bucket floor; then the zstd command line on the
# same bytes. Usage (project root, as root): scripts/device-mount-ab.sh OLD_BIN NEW_BIN OUT_DIR [RUNS]
set -euo pipefail
old=$1 new=$2 out=$3 runs=${4:-2}
mkdir -p "$out"
if [ ! -f /dev/shm/real.512m ]; then
  # (tar stops early on the closed pipe; only the bytes matter)
  tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g || true
  head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
fi
{ uname -a; nproc; grep -m1 'model name' /proc/cpuinfo; free -g | head -2; } > "$out/machine.txt"
export AB_VARIANTS="${AB_VARIANTS:-old new new+wb}"
scripts/ab-write.sh "$old" "$new" /dev/shm/real.2g "$runs" "none zstd" 1 | tee "$out/ab-1writer.txt"
scripts/ab-write.sh "$old" "$new" /dev/shm/real.512m "$runs" "none zstd" 8 | tee "$out/ab-8writers.txt"
AB_BUCKET=memory scripts/ab-write.sh "$old" "$new" /dev/shm/real.2g "$runs" none 1 | tee "$out/ab-memory-floor.txt"
if command -v zstd >/dev/null; then
  for i in $(seq "$runs"); do
    /usr/bin/time -f "zstd -1 -T$(nproc): %e s" zstd -q -1 -T"$(nproc)" -f /dev/shm/real.2g -o /dev/shm/real.2g.zst
    /usr/bin/time -f "zstd -d: %e s" zstd -q -d -c /dev/shm/real.2g.zst > /dev/null
  done 2>&1 | tee "$out/zstd-cli.txt"
  rm -f /dev/shm/real.2g.zst
fi
