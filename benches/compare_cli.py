#!/usr/bin/env python3
"""Side-by-side: `shrinkfs pack/unpack` against the zstd and lz4 command-line tools, per corpus.

Usage: benches/compare_cli.py [--size 64M] [--runs 3] [--corpora logs,json,...] [--bin PATH]
Every tool reads the same file from the page cache and writes to the same directory; each figure
is the best of --runs. Prints a Markdown table (MB/s are of raw bytes, MB = 10^6 bytes).
"""
import argparse, os, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--size", default="64M")
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--corpora", default="logs,json,csv,source,elf,numeric,random,compressed")
ap.add_argument("--bin", default="target/release/shrinkfs")
ap.add_argument("--threads", type=int, default=os.cpu_count())
args = ap.parse_args()
sk = os.path.abspath(args.bin)

def best(cmd, runs):
    t = []
    for _ in range(runs):
        s = time.perf_counter()
        subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)
        t.append(time.perf_counter() - s)
    return min(t)

T = args.threads
rows = []
with tempfile.TemporaryDirectory(dir=".") as d:
    for kind in args.corpora.split(","):
        src = f"{d}/{kind}"
        subprocess.run([sk, "corpus", kind, args.size, src], check=True)
        raw = os.path.getsize(src)
        open(src, "rb").read()  # warm the page cache
        cases = [
            ("shrinkfs zstd-1", f"{sk} pack --codec zstd --level 1 {src} {d}/o.skf", f"{sk} unpack {d}/o.skf {d}/o.raw", f"{d}/o.skf"),
            (f"zstd -1 -T{T}", f"zstd -q -f -1 -T{T} {src} -o {d}/o.zst", f"zstd -q -f -d {d}/o.zst -o {d}/o.raw", f"{d}/o.zst"),
            ("shrinkfs zstd-3", f"{sk} pack --codec zstd --level 3 {src} {d}/o.skf", f"{sk} unpack {d}/o.skf {d}/o.raw", f"{d}/o.skf"),
            (f"zstd -3 -T{T}", f"zstd -q -f -3 -T{T} {src} -o {d}/o.zst", f"zstd -q -f -d {d}/o.zst -o {d}/o.raw", f"{d}/o.zst"),
            ("shrinkfs lz4", f"{sk} pack --codec lz4 {src} {d}/o.skf", f"{sk} unpack {d}/o.skf {d}/o.raw", f"{d}/o.skf"),
            ("lz4 -1", f"lz4 -q -f -1 {src} {d}/o.lz4", f"lz4 -q -f -d {d}/o.lz4 {d}/o.raw", f"{d}/o.lz4"),
        ]
        for name, comp, decomp, out in cases:
            tc = best(comp, args.runs)
            stored = os.path.getsize(out)
            td = best(decomp, args.runs)
            if open(f"{d}/o.raw", "rb").read() != open(src, "rb").read():
                sys.exit(f"{name} on {kind}: roundtrip differs")
            rows.append((kind, name, raw / stored, raw / tc / 1e6, raw / td / 1e6, stored))
        os.remove(src)

print(f"| corpus | tool | ratio | compress MB/s | decompress MB/s | stored bytes |")
print(f"|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]:.3f} | {r[3]:.0f} | {r[4]:.0f} | {r[5]} |")
print()
print("Side-by-side ratios (shrinkfs / CLI):")
for i in range(0, len(rows), 6):
    k = rows[i][0]
    for a, b in ((0, 1), (2, 3), (4, 5)):
        sa, sb = rows[i + a], rows[i + b]
        print(f"- {k}: {sa[1]} vs {sb[1]}: size {sa[5]/sb[5]:.3f}x, compress speed {sa[3]/sb[3]:.2f}x, decompress speed {sa[4]/sb[4]:.2f}x")
