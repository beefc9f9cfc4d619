#!/usr/bin/env bash
# Installs a shrinkfs .deb into a clean Debian 12 (bookworm) chroot with apt, as an operator
# would, then checks what it put where and mounts through it: `mount -t shrinkfs` (the package's
# /sbin/mount.shrinkfs) with settings from /etc/shrinkfs/config.toml, write, read back, an fstab
# line, umount, and the object left in the bucket. Purging the package at the end leaves nothing.
#
# Usage: scripts/test-deb.sh DEB      (root; /dev/fuse; mmdebstrap; a Debian mirror)
# The clean chroot (mmdebstrap --variant=apt) is cached as target/deb-test/bookworm.tar and made
# again when older than 7 days. DEB_MIRROR picks the mirror (default http://deb.debian.org/debian).
# Everything runs in its own mount and PID namespace: the chroot's mounts and the mount process
# end with the script, whatever happens.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/test-deb.sh DEB" >&2; exit 2; }
deb=$(realpath "$1")
cd "$(dirname "$0")/.."
if [ -z "${SHRINKFS_DEB_TEST_NS:-}" ]; then
  exec env SHRINKFS_DEB_TEST_NS=1 unshare --mount --propagation private --pid --fork --mount-proc -- "$0" "$deb"
fi
start=$(date +%s)
step() { echo "== $(($(date +%s) - start))s: $*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

cache=target/deb-test
tarball=$cache/bookworm.tar
mkdir -p "$cache"
if [ ! -f "$tarball" ] || [ -n "$(find "$tarball" -mtime +7)" ]; then
  step "making a clean bookworm chroot with mmdebstrap"
  rm -f "$cache/bookworm.new.tar"
  mmdebstrap --quiet --variant=apt --format=tar bookworm "$cache/bookworm.new.tar" \
    "${DEB_MIRROR:-http://deb.debian.org/debian}" </dev/null
  mv "$cache/bookworm.new.tar" "$tarball"
fi

# Chroots of runs that were killed (their mounts went with their namespace).
find "$cache" -maxdepth 1 -name 'root.*' -mmin +120 -exec rm -rf --one-file-system {} +
root=$(realpath "$(mktemp -d "$cache/root.XXXXXX")")
cleanup() {
  # The namespace takes the mounts with it; unmount first so that rm never walks into one.
  umount -R "$root/mnt/data" "$root/mnt/fstab" "$root/dev" "$root/proc" "$root/sys" 2>/dev/null || true
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
tar -C "$root" -xf "$tarball"
mount --rbind /dev "$root/dev"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$deb" "$root/tmp/shrinkfs.deb"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }

step "apt-get install ./shrinkfs.deb in the clean chroot"
in_root dpkg-query -W shrinkfs >/dev/null 2>&1 && fail "the clean chroot already has shrinkfs"
in_root apt-get -q update >/dev/null
in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y install /tmp/shrinkfs.deb >"$root/tmp/apt.log" 2>&1 \
  || { cat "$root/tmp/apt.log"; fail "apt-get install"; }
echo "installed: $(in_root dpkg-query -W -f='${Package} ${Version}, depends: ${Depends}' shrinkfs)"

step "what the package installed"
for f in /usr/bin/shrinkfs /lib/systemd/system/shrinkfs-mount@.service /etc/shrinkfs/config.toml \
  /usr/share/man/man1/shrinkfs.1.gz /usr/share/man/man1/shrinkfs-mount.1.gz /usr/share/man/man8/mount.shrinkfs.8.gz \
  /usr/share/bash-completion/completions/shrinkfs /usr/share/zsh/vendor-completions/_shrinkfs \
  /usr/share/fish/vendor_completions.d/shrinkfs.fish /usr/share/doc/shrinkfs/copyright \
  /usr/share/doc/shrinkfs/examples/mnt-data.mount /usr/share/doc/shrinkfs/examples/fstab.example; do
  in_root dpkg -S "$f" >/dev/null 2>&1 || fail "$f is not from the package"
  [ -e "$root$f" ] || fail "$f is missing"
done
[ "$(readlink "$root/sbin/mount.shrinkfs")" = /usr/bin/shrinkfs ] || fail "/sbin/mount.shrinkfs is not a link to /usr/bin/shrinkfs"
[ "$(readlink "$root/sbin/mount.fuse.shrinkfs")" = /usr/bin/shrinkfs ] || fail "/sbin/mount.fuse.shrinkfs is not a link to /usr/bin/shrinkfs"
in_root dpkg-query -W -f='${Conffiles}\n' shrinkfs | grep -q /etc/shrinkfs/config.toml || fail "config.toml is not a conffile"
file_out=$(od -A n -t x1 -N 4 "$root/usr/bin/shrinkfs" | tr -d ' ')
[ "$file_out" = 7f454c46 ] || fail "/usr/bin/shrinkfs is not an ELF file"
grep -q /usr/local "$root/lib/systemd/system/shrinkfs-mount@.service" && fail "the unit names /usr/local"
grep -q '^ExecStart=/usr/bin/shrinkfs mount' "$root/lib/systemd/system/shrinkfs-mount@.service" || fail "the unit's ExecStart"
zcat "$root/usr/share/man/man1/shrinkfs-mount.1.gz" | grep -q SHRINKFS_MEMORY_LIMIT || fail "the mount man page names no variables"
grep -q -- '--memory-limit' "$root/usr/share/bash-completion/completions/shrinkfs" || fail "bash completion"
in_root shrinkfs --version
readelf -S -W "$root/usr/bin/shrinkfs" | grep -q -e ' \.debug_info ' -e ' \.symtab ' && fail "/usr/bin/shrinkfs is not stripped"
echo "binary: $(du -h "$root/usr/bin/shrinkfs" | cut -f1), stripped"

step "mount -t shrinkfs, with frame-size from the config file"
in_root mkdir -p /srv/bucket /mnt/data
# The shipped settings file sets nothing; set two, as an operator would.
sed -i 's/^\[mount\]$/[mount]\nframe-size = "64K"\nmemory-limit = "128M"/' "$root/etc/shrinkfs/config.toml"
in_root mount -t shrinkfs -o codec=zstd,level=3,noatime,log-file=/var/log/shrinkfs.log /srv/bucket /mnt/data \
  || { cat "$root/var/log/shrinkfs.log" 2>/dev/null; fail "mount -t shrinkfs"; }
line=$(grep " $root/mnt/data " /proc/mounts || true)
echo "mounted: $line"
case "$line" in *" fuse.shrinkfs "*noatime*) ;; *) fail "no fuse.shrinkfs mount with noatime at /mnt/data" ;; esac
in_root sh -c 'seq 1 100000 > /mnt/data/numbers.txt && cp /usr/share/doc/shrinkfs/README.md.gz /mnt/data/'
in_root sh -c 'seq 1 100000 | cmp - /mnt/data/numbers.txt' || fail "read back through the mount differs"
in_root cmp /usr/share/doc/shrinkfs/README.md.gz /mnt/data/README.md.gz || fail "README.md.gz differs"
# The process serving the mount (this PID namespace's own /proc).
pid=""
for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)" in *shrinkfs*/mnt/data*) pid=${p#/proc/} ;; esac
done
[ -n "$pid" ] || fail "no mount process"
echo "serving process: $(tr '\0' ' ' <"/proc/$pid/cmdline")"

step "an fstab line, mounted by its mount point"
in_root mkdir -p /mnt/fstab
echo "/srv/bucket /mnt/fstab shrinkfs noexec,metadata-ttl=0,_netdev,nofail 0 0" >>"$root/etc/fstab"
in_root mount /mnt/fstab || fail "mount /mnt/fstab (fstab)"
grep " $root/mnt/fstab fuse.shrinkfs [^ ]*noexec" /proc/mounts >/dev/null || fail "the fstab mount is not a noexec fuse.shrinkfs mount"
in_root cmp /mnt/fstab/README.md.gz /usr/share/doc/shrinkfs/README.md.gz || fail "read through the fstab mount"
in_root mount -o remount,ro /mnt/fstab || fail "mount -o remount,ro /mnt/fstab"
grep " $root/mnt/fstab fuse.shrinkfs ro,[^ ]*noexec" /proc/mounts >/dev/null || fail "not read-only (and noexec) after remount,ro"
in_root sh -c 'echo x > /mnt/fstab/new' 2>/dev/null && fail "a write succeeded on the read-only remount"
in_root umount /mnt/fstab || fail "umount /mnt/fstab"

step "umount, then the bucket"
in_root umount /mnt/data || fail "umount"
for _ in $(seq 100); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
[ ! -d "/proc/$pid" ] || fail "the mount process did not exit after umount"
grep -q " $root/mnt/data " /proc/mounts && fail "still mounted"
report=$(in_root shrinkfs inspect /srv/bucket/numbers.txt)
echo "$report" | sed 's/^/  /'
echo "$report" | grep -q 'frames' || fail "inspect"
frame=$(in_root shrinkfs inspect --json /srv/bucket/numbers.txt | sed -n 's/^ *"frame_size": *\([0-9]*\).*/\1/p')
[ "$frame" = 65536 ] || fail "frame size $frame, not 64K from the config file"
raw=$(in_root sh -c 'seq 1 100000 | wc -c')
stored=$(stat -c %s "$root/srv/bucket/numbers.txt")
[ "$stored" -lt "$raw" ] || fail "stored $stored bytes of $raw: not compressed"
in_root shrinkfs unpack /srv/bucket/numbers.txt /tmp/numbers.txt
in_root sh -c 'seq 1 100000 | cmp - /tmp/numbers.txt' || fail "unpack differs"
grep -q panicked "$root/var/log/shrinkfs.log" && fail "the mount's log has a panic"

step "dpkg --purge"
in_root dpkg --purge shrinkfs >/dev/null
for f in /usr/bin/shrinkfs /sbin/mount.shrinkfs /sbin/mount.fuse.shrinkfs /etc/shrinkfs/config.toml /lib/systemd/system/shrinkfs-mount@.service; do
  [ ! -e "$root$f" ] && [ ! -L "$root$f" ] || fail "$f is left after purge"
done
step "ok"
