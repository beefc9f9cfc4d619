#!/bin/bash
# repro-6: sealed objects are not bound to their name (or version): an attacker who can write the
# bucket but has no key copies one sealed object over another (or puts back an older version of
# the same file), and the sealed mount and `unpack` serve it as authentic. FORMAT.md's "What is
# protected" list does not say names/versions are unprotected. (Doc gap / design limitation.)
B=${B:-/work/bin-new/shrinkfs-s31base}
W=$(mktemp -d /tmp/probe31d/r6.XXXXXX); M="$W/mnt"
cleanup(){ mountpoint -q "$M" && $B unmount "$M" >/dev/null 2>&1; rm -rf "$W"; }
trap cleanup EXIT
mkdir -p "$W/bucket" "$M"; ( umask 077; head -c 32 /dev/urandom > "$W/key" )
mnt(){ $B mount --key-file "$W/key" "$W/bucket" "$M" 2>>"$W/log" &
  for i in $(seq 50); do mountpoint -q "$M" && break; sleep 0.1; done; }
mnt; echo "ssh-ed25519 AAAA-legit admin" > "$M/authorized_keys"; echo "ssh-ed25519 AAAA-attacker eve" > "$M/eve_notes"
echo "v1 config: allow_all=false" > "$M/cfg"; cp "$W/bucket/cfg" "$W/cfg.v1"; echo "v2 config: allow_all=false, patched" > "$M/cfg"
$B unmount "$M" >/dev/null 2>&1
cp "$W/bucket/eve_notes" "$W/bucket/authorized_keys"      # no key needed
cp "$W/cfg.v1" "$W/bucket/cfg"                           # rollback, no key needed
mnt; a=$(cat "$M/authorized_keys" 2>&1); c=$(cat "$M/cfg" 2>&1); $B unmount "$M" >/dev/null 2>&1
u=$($B unpack --key-file "$W/key" "$W/bucket/authorized_keys" - 2>&1)
if echo "$a" | grep -q attacker && echo "$c" | grep -q v1; then
  echo "FAIL: substituted/rolled-back sealed objects served as authentic: authorized_keys='$a' cfg='$c' unpack='$u'"; exit 1
fi
echo "PASS: substitution refused (authorized_keys='$a', cfg='$c')"
