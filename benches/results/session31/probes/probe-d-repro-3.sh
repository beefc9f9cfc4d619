#!/bin/bash
# repro-3: an empty SHRINKFS_KEY_FILE is silently ignored: `pack` and `mount` run without a key
# and write unsealed objects, exit 0, no warning; the same empty value on the command line or in
# the config file is refused (exit 2).
B=${B:-/work/bin-new/shrinkfs-s31base}
W=$(mktemp -d /tmp/probe31d/r3.XXXXXX); trap 'rm -rf "$W"' EXIT
cd "$W" || exit 1
echo "confidential" > in
$B pack --key-file "" in cli.skf >/dev/null 2>&1; rc_cli=$?
SHRINKFS_KEY_FILE= $B pack in env.skf 2>err; rc_env=$?
if [ $rc_env -eq 0 ] && [ -s env.skf ]; then
  sealed=$($B inspect env.skf | awk '/^sealed:/{print $2}')
  if [ "$sealed" = "no" ]; then
    echo "FAIL: SHRINKFS_KEY_FILE='' -> pack exit 0, object unsealed, stderr='$(tr '\n' ' ' < err)' (--key-file '' exits $rc_cli)"; exit 1
  fi
fi
echo "PASS: empty SHRINKFS_KEY_FILE refused or sealed (rc $rc_env)"
