#!/bin/bash
# repro-5: `mount --key-file` over a bucket whose objects are all plain (not shrinkfs) mounts with no
# warning, although every file then fails with EACCES; SEMANTICS.md: "a key over a bucket whose
# sampled objects are all unsealed mounts with a warning" (it warns for unsealed shrinkfs objects).
B=${B:-/work/bin-new/shrinkfs-s31base}
W=$(mktemp -d /tmp/probe31d/r5.XXXXXX); M="$W/mnt"
cleanup(){ mountpoint -q "$M" && $B unmount "$M" >/dev/null 2>&1; rm -rf "$W"; }
trap cleanup EXIT
mkdir -p "$W/bucket" "$M"; ( umask 077; head -c 32 /dev/urandom > "$W/key" )
for i in 1 2 3; do echo "plain file $i" > "$W/bucket/f$i"; done
$B mount --key-file "$W/key" "$W/bucket" "$M" 2>"$W/log" &
for i in $(seq 50); do mountpoint -q "$M" && break; sleep 0.1; done
mountpoint -q "$M" || { echo "FAIL setup: no mount ($(cat "$W/log"))"; exit 1; }
sleep 0.3
cat "$M/f1" >/dev/null 2>"$W/cat.err"; rc=$?
if ! grep -q WARN "$W/log"; then
  echo "FAIL: no warning at mount over an all-plain bucket with --key-file; then cat f1 -> rc $rc: $(head -c 60 "$W/cat.err")"; exit 1
fi
echo "PASS: warned: $(grep WARN "$W/log" | head -1 | cut -c1-120)"
