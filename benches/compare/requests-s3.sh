#!/bin/bash
# Store requests per small-file step on s3rver: starts s3rver (the comparison's server, from
# target/test-tools: run benches/compare/run.sh once first) in a fresh directory under
# REQ_DIR (default /dev/shm: this machine's ext4 slows new files after deletes), mounts
# SHRINKFS_EXECUTABLE on it with metrics, runs requests.py with N files, and cleans up.
# REQ_MOUNT_OPTIONS adds options to the mount (e.g. "--deletes-behind 4096").
# Usage: benches/compare/requests-s3.sh SHRINKFS_EXECUTABLE [N]   (root: it drops caches)
set -u
bin=$1 n=${2:-2000}
tools=$(cd "$(dirname "$0")/../.." && pwd)/target/test-tools
w=$(mktemp -d "${REQ_DIR:-/dev/shm}/reqs3.XXXX"); mkdir -p "$w/s3" "$w/m"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
NODE_OPTIONS=--openssl-legacy-provider "$tools/node_modules/.bin/s3rver" -d "$w/s3" -a 127.0.0.1 -p "$port" --silent --configure-bucket b &
sp=$!
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.2; done
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
mport=$((port + 1))
"$bin" mount s3://b "$w/m" --endpoint-url "http://127.0.0.1:$port" --daemon --metrics-addr "127.0.0.1:$mport" ${REQ_MOUNT_OPTIONS:-}
python3 "$(dirname "$0")/requests.py" "$w/m" "http://127.0.0.1:$mport/metrics" "$n"
umount "$w/m" || umount -l "$w/m"; sleep 0.5; kill "$sp"; wait "$sp" 2>/dev/null; rm -rf "$w"
