BIN=${SHRINKFS:-/work/bin-new/shrinkfs-s30base}
P=/tmp/probe30b
mnt_up() { # bucket mnt [extra args]
  local b=$1 m=$2; shift 2
  mkdir -p "$b" "$m"
  $BIN mount "$b" "$m" --gpu off --daemon --log-file $P/log-$(basename $m).txt "$@" || { echo "mount failed"; return 1; }
}
mnt_down() { $BIN unmount "$1" >/dev/null 2>&1 || umount -l "$1"; }
s3_up() { # bucket mnt [extra]
  local b=$1 m=$2; shift 2; mkdir -p $m
  AWS_ACCESS_KEY_ID=testaccesskey AWS_SECRET_ACCESS_KEY=testsecretkey AWS_REGION=us-east-1 $BIN mount s3://$b $m --endpoint-url http://127.0.0.1:9556 --allow-http --gpu off --daemon --retry-timeout 5 --log-file $P/log-$(basename $m).txt "$@" || { echo "mount failed"; return 1; }
}
