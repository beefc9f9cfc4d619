#!/usr/bin/env bash
# Builds the Debian package: target/debian/shrinkfs_VERSION-1_ARCH.deb (its path is the last line
# printed). It holds the stripped binary (/usr/bin/shrinkfs), the mount(8) helper
# (/sbin/mount.shrinkfs, a link to it), the systemd unit template, man pages and bash/zsh/fish
# completions generated from the CLI, the settings file /etc/shrinkfs/config.toml (a conffile,
# everything commented out), the docs and examples.
#
# Usage: scripts/package.sh [--binary FILE] [--out DIR]
#   --binary FILE  package FILE instead of building `cargo build --profile packaging` (the package
#                  test packages the binary under test this way; it is stripped all the same)
#   --out DIR      where to write the .deb (default target/debian)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
binary=""
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$(realpath "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: scripts/package.sh [--binary FILE] [--out DIR]" >&2; exit 2 ;;
  esac
done
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
target=${CARGO_TARGET_DIR:-$repo/target}
out=${out:-$target/debian}
if [ -z "$binary" ]; then
  cargo build --locked --profile packaging --bin shrinkfs
  binary=$target/packaging/shrinkfs
fi
# The binary must not read a settings file of this host while it describes itself.
run() { SHRINKFS_CONFIG= "$@"; }
version=$(run "$binary" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)
deb_version="$version-1"

stage=$(mktemp -d "${TMPDIR:-/tmp}/shrinkfs-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/root
gen=$stage/generated
mkdir -p "$root/DEBIAN"

install -D -m 755 "$binary" "$root/usr/bin/shrinkfs"
strip --strip-unneeded "$root/usr/bin/shrinkfs"
# mount(8) looks for helpers in /sbin; the binary acts as one when run by these names:
# mount.shrinkfs for entries of type shrinkfs, mount.fuse.shrinkfs for what /proc/mounts lists
# as fuse.shrinkfs (`mount -o remount,ro DIR`; without it mount(8) would run fuse3's mount.fuse).
mkdir -p "$root/sbin"
ln -s /usr/bin/shrinkfs "$root/sbin/mount.shrinkfs"
ln -s /usr/bin/shrinkfs "$root/sbin/mount.fuse.shrinkfs"

run "$root/usr/bin/shrinkfs" package-files "$gen"
for page in "$gen"/man/*; do
  section=${page##*.}
  install -D -m 644 "$page" "$root/usr/share/man/man$section/$(basename "$page")"
  gzip -9n "$root/usr/share/man/man$section/$(basename "$page")"
done
install -D -m 644 "$gen/completions/shrinkfs.bash" "$root/usr/share/bash-completion/completions/shrinkfs"
install -D -m 644 "$gen/completions/_shrinkfs" "$root/usr/share/zsh/vendor-completions/_shrinkfs"
install -D -m 644 "$gen/completions/shrinkfs.fish" "$root/usr/share/fish/vendor_completions.d/shrinkfs.fish"

install -D -m 644 packaging/shrinkfs-mount@.service "$root/lib/systemd/system/shrinkfs-mount@.service"
sed -i 's#/usr/local/bin/shrinkfs#/usr/bin/shrinkfs#g' "$root/lib/systemd/system/shrinkfs-mount@.service"
install -D -m 644 packaging/config.toml "$root/etc/shrinkfs/config.toml"

doc=$root/usr/share/doc/shrinkfs
# A .mount unit named after a mount point is live wherever it is installed (systemd would pull
# it in for anything under /mnt/data), so the example stays an example.
install -D -m 644 packaging/mnt-data.mount "$doc/examples/mnt-data.mount"
install -D -m 644 packaging/fstab.example "$doc/examples/fstab.example"
for f in README.md docs/OPERATING.md docs/SEMANTICS.md docs/FORMAT.md; do
  install -D -m 644 "$f" "$doc/$(basename "$f")"
  gzip -9n "$doc/$(basename "$f")"
done
maintainer=${DEB_MAINTAINER:-shrinkfs developers <dev@shrinkfs.dev>}
# Dated by the last commit (the build time where there is no git), so that two builds of one
# commit agree.
when=$(git log -1 --format=%ct 2>/dev/null || date +%s)
cat > "$doc/changelog.Debian" <<EOF
shrinkfs ($deb_version) unstable; urgency=medium

  * Built by scripts/package.sh from the shrinkfs source tree$(git rev-parse --short HEAD 2>/dev/null | sed 's/^/, commit /').

 -- $maintainer  $(date -R -u -d "@$when")
EOF
gzip -9n "$doc/changelog.Debian"
cat > "$doc/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: shrinkfs

Files: *
Copyright: $(date -u -d "@$when" +%Y) the shrinkfs developers
License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF

# The libraries the binary links, as Debian dependencies (dpkg-shlibdeps wants a debian/ dir).
mkdir -p "$stage/shlibs/debian"
touch "$stage/shlibs/debian/control"
shlibs=$(cd "$stage/shlibs" && dpkg-shlibdeps -O -e"$root/usr/bin/shrinkfs" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$shlibs" ] || { echo "package: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

cat > "$root/DEBIAN/control" <<EOF
Package: shrinkfs
Version: $deb_version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $shlibs, fuse3
Recommends: ca-certificates
Section: utils
Priority: optional
Description: filesystem over an object store that compresses file data
 shrinkfs mounts an object-store bucket (S3, any S3-compatible server, or a
 local directory) with FUSE and compresses file data transparently: programs
 read and write ordinary files, the bucket stores one compressed object per
 file under the same key, and a read fetches and decodes only the frames it
 touches. Frames can be sealed with AES-256-GCM and compressed on an NVIDIA
 GPU where one is found.
 .
 The package holds the shrinkfs command, the mount.shrinkfs helper for fstab
 and mount -t shrinkfs, a systemd unit template, man pages and completions.
EOF
echo /etc/shrinkfs/config.toml > "$root/DEBIAN/conffiles"
for script in postinst postrm; do
  cat > "$root/DEBIAN/$script" <<'EOF'
#!/bin/sh
# Lets a running systemd see the unit template as installed, changed or removed.
set -e
if [ -d /run/systemd/system ]; then
  systemctl --system daemon-reload >/dev/null 2>&1 || true
fi
EOF
  chmod 755 "$root/DEBIAN/$script"
done
# Conffiles are left out, as dpkg keeps their sums itself.
(cd "$root" && find . \( -path ./DEBIAN -o -path ./etc \) -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"

mkdir -p "$out"
deb="$out/shrinkfs_${deb_version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "package: $(du -h "$deb" | cut -f1) package, binary $(du -h "$root/usr/bin/shrinkfs" | cut -f1) stripped" >&2
echo "$deb"
