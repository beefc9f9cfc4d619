B=/work/bin-new/shrinkfs-s30base
# mnt NAME SOURCE [extra args...] -> sets PID_<NAME>
mountfs() { local name=$1 src=$2; shift 2; local mp=/tmp/probe30a/mnt-$name; mkdir -p $mp /tmp/probe30a/stage-$name
  $B mount "$src" $mp --gpu off --staging-dir /tmp/probe30a/stage-$name --log-file /tmp/probe30a/log-$name.txt "$@" &
  local pid=$!; for i in $(seq 100); do mountpoint -q $mp && break; sleep 0.1; done; echo $pid > /tmp/probe30a/pid-$name; echo "mounted $name pid=$pid"; }
meas() { local pid=$1; local rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status); local hwm=$(awk '/VmHWM/{print $2}' /proc/$pid/status); local th=$(awk '/Threads/{print $2}' /proc/$pid/status); local fd=$(ls /proc/$pid/fd | wc -l); echo "rss=${rss}kB hwm=${hwm}kB threads=$th fds=$fd"; }
