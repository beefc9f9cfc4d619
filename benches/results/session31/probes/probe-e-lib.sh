B=/work/bin-new/shrinkfs-s31base
P=/tmp/probe31e
export SHRINKFS_CONFIG=
# kill only shrinkfs processes whose args mention $1 (a path under /tmp/probe31e)
killmine() { for pid in $(pgrep -f "shrinkfs-s31base"); do if tr '\0' ' ' </proc/$pid/cmdline 2>/dev/null | grep -q -- "$1"; then kill -9 $pid 2>/dev/null; fi; done; }
cleanup_mp() { umount -l "$1" 2>/dev/null; fusermount3 -uz "$1" 2>/dev/null; killmine "$1"; }
waitmount() { for i in $(seq 1 100); do mountpoint -q "$1" && return 0; sleep 0.1; done; return 1; }
