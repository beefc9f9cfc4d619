# shared helpers for shrinkfs probes
BIN=${BIN:-/work/bin-new/shrinkfs-s31base}
P=/tmp/probe31c
# smount BUCKET MNT [opts...]
smount() {
  local b=$1 m=$2; shift 2
  mkdir -p "$b" "$m"; mountpoint -q "$m" && { echo "already mounted $m"; return 1; }
  "$BIN" mount "$@" "$b" "$m" >>"$P/mount-$(basename $m).log" 2>&1 &
  SPID=$!
  for i in $(seq 1 200); do mountpoint -q "$m" && return 0; sleep 0.05; done
  echo "mount failed"; return 1
}
sumount() {
  local m=$1
  "$BIN" unmount "$m" >/dev/null 2>&1 || fusermount3 -u "$m" 2>/dev/null
  for i in $(seq 1 400); do mountpoint -q "$m" || break; sleep 0.05; done
  if [ -n "$SPID" ]; then
    for i in $(seq 1 400); do kill -0 $SPID 2>/dev/null || break; sleep 0.05; done
    wait $SPID 2>/dev/null; SRC=$?
  fi
}
sha() { sha256sum "$1" | cut -c1-64; }
