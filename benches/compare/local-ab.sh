#!/usr/bin/env bash
# Small files and metadata on local-directory buckets: one `shrinkfs bench fs` run measures the
# plain local disk and a shrinkfs mount of a local-directory bucket for each executable given,
# each mount its own bucket, all with default options, in the order given (whichever runs first
# meets a colder machine: run it again in the other order to see that effect).
# Usage: benches/compare/local-ab.sh 'LABEL=SHRINKFS_EXECUTABLE [mount options]'... -- [bench fs options]
#   e.g. benches/compare/local-ab.sh old=/work/bin-old/shrinkfs new=target/release/shrinkfs \
#          'ttl=target/release/shrinkfs --metadata-ttl indefinite' -- --workloads small-files,ls --files 10000
# The last executable runs `bench fs`, or LOCAL_AB_BENCH=EXECUTABLE (so both orders measure with the
# same bench code). Output: target/bench-fs/local-ab.{json,html}. Needs root
# (FUSE mounts, dropping caches).
set -euo pipefail
cd "$(dirname "$0")/../.."
labels=(); bins=(); opts=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case $1 in
    *=*)
      labels+=("${1%%=*}")
      read -r exe rest <<<"${1#*=}"
      bins+=("$(realpath "$exe")"); opts+=("${rest:-}") ;;
    *) echo "local-ab: expected LABEL=EXECUTABLE, got $1" >&2; exit 2 ;;
  esac
  shift
done
[ $# -gt 0 ] && shift
[ ${#bins[@]} -gt 0 ] || { echo "usage: $0 LABEL=EXECUTABLE... -- [bench fs options]" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/shrinkfs-local-ab.XXXXXX")
cleanup() {
  for l in "${labels[@]}"; do
    fusermount3 -u "$work/mnt/$l" >/dev/null 2>&1 || umount -l "$work/mnt/$l" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/local"
args=()
for i in "${!labels[@]}"; do
  l=${labels[$i]}
  mkdir -p "$work/bucket/$l" "$work/mnt/$l"
  read -ra o <<<"${opts[$i]}"
  "${bins[$i]}" mount "$work/bucket/$l" "$work/mnt/$l" --daemon "${o[@]}"
  for _ in $(seq 100); do mountpoint -q "$work/mnt/$l" && break; sleep 0.1; done
  mountpoint -q "$work/mnt/$l" || { echo "local-ab: $l did not mount" >&2; exit 1; }
  args+=(--target "$l=$work/mnt/$l" --backend "$l=$work/bucket/$l")
done
mkdir -p target/bench-fs
"${LOCAL_AB_BENCH:-${bins[-1]}}" bench fs --baseline "local=$work/local" "${args[@]}" \
  --json target/bench-fs/local-ab.json --html target/bench-fs/local-ab.html "$@"
