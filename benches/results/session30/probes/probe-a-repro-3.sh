#!/bin/bash
# Idle TCP connections to --metrics-addr are never closed by the mount; enough of them use up the
# mount's descriptor limit and then every filesystem operation fails with EIO.
B=/work/bin-new/shrinkfs-s30base; T=$(mktemp -d /tmp/r3.XXXX); mkdir $T/b $T/m; PORT=19473
prlimit --nofile=2048:2048 $B mount $T/b $T/m --gpu off --log-file $T/log --metrics-addr 127.0.0.1:$PORT & P=$!
for i in $(seq 100); do mountpoint -q $T/m && break; sleep 0.1; done
echo hello > $T/m/before
base=$(ls /proc/$P/fd | wc -l)
python3 - $PORT $T/m $P $base <<'PY'
import socket, time, sys, os
port, mp, pid, base = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
nfd = lambda: len(os.listdir("/proc/%s/fd" % pid))
idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
time.sleep(70)
print("after 70 s idle: mount fds %d (baseline %d, 50 idle connections)" % (nfd(), base))
stuck = nfd() >= base + 50
more = []
try:
    for _ in range(2100): more.append(socket.create_connection(("127.0.0.1", port), timeout=2))
except Exception as e: pass
time.sleep(1)
try: open(mp + "/during", "wb").write(b"x" * 1000); ok = True; print("write while flooded: ok")
except OSError as e: ok = False; print("write while flooded:", e)
for s in idle + more: s.close()
sys.exit(1 if (stuck or not ok) else 0)
PY
r=$?; $B unmount $T/m >/dev/null 2>&1 || umount -l $T/m; wait $P 2>/dev/null; rm -rf $T
[ $r -eq 0 ] && echo PASS || echo FAIL
