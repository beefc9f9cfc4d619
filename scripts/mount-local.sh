#!/usr/bin/env bash
# Sets up what shrinkfs needs, builds it, and mounts a local directory (the bucket) at a mount
# point with zstd compression, in the foreground: Ctrl-C uploads pending files and unmounts.
# Usage: scripts/mount-local.sh [BUCKET_DIR] [MOUNTPOINT] [shrinkfs mount options...]
set -euo pipefail
bucket=${1:-./bucket}; mnt=${2:-./mnt}; shift $(( $# < 2 ? $# : 2 ))
mkdir -p "$bucket" "$mnt"
bucket=$(realpath "$bucket"); mnt=$(realpath "$mnt")   # before leaving the caller's directory
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --quiet
echo "shrinkfs: mounting $bucket at $mnt (zstd). Ctrl-C to unmount." >&2
exec target/release/shrinkfs mount "$bucket" "$mnt" --codec zstd "$@"
