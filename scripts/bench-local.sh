#!/usr/bin/env bash
# Sets up, builds, and measures a shrinkfs mount of a local directory against the plain local
# disk: `shrinkfs bench fs` with every workload; the report lands in target/bench-fs/.
# Usage: scripts/bench-local.sh [shrinkfs bench fs options, e.g. --size 1G --files 10000]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --quiet
out=target/bench-fs; work=$(mktemp -d "${TMPDIR:-/tmp}/shrinkfs-bench.XXXXXX")
mkdir -p "$out" "$work/bucket" "$work/mnt" "$work/local"
cleanup() {
  target/release/shrinkfs unmount "$work/mnt" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
target/release/shrinkfs mount "$work/bucket" "$work/mnt" --daemon
target/release/shrinkfs bench fs --baseline "local=$work/local" --target "shrinkfs=$work/mnt" \
  --backend "shrinkfs=$work/bucket" --json "$out/local.json" --html "$out/local.html" "$@"
