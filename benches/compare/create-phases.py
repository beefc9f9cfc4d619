#!/usr/bin/env python3
"""Time of open(O_CREAT), write(4 KiB) and close per file, averaged over N new files in DIR.
Usage: benches/compare/create-phases.py DIR N   (DIR: a mount, or a plain directory to compare)"""
import os, sys, time
d = sys.argv[1]; n = int(sys.argv[2])
data = os.urandom(4096)
t = {"open": 0, "write": 0, "close": 0}
for i in range(n):
    p = f"{d}/p{i}"
    a = time.perf_counter(); fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    b = time.perf_counter(); os.write(fd, data)
    c = time.perf_counter(); os.close(fd)
    e = time.perf_counter()
    t["open"] += b - a; t["write"] += c - b; t["close"] += e - c
print(" ".join(f"{k} {v/n*1e6:.0f}us" for k, v in t.items()), f"total {sum(t.values())/n*1e6:.0f}us")
