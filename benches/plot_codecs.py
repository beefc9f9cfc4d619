#!/usr/bin/env python3
"""Plots the JSON of `shrinkfs bench codecs --json FILE`: compress and decompress GB/s of every codec,
CPU (all cores) beside GPU, per corpus and frame size, with the ratio on each bar.

Usage: benches/plot_codecs.py RESULTS.json OUT.png   (needs matplotlib: pip install matplotlib)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

rows = json.load(open(sys.argv[1]))
groups = sorted({(r["corpus"], r["frame"]) for r in rows}, key=lambda g: (g[0], g[1]))
fig, axes = plt.subplots(len(groups), 2, figsize=(14, 3.2 * len(groups)), squeeze=False)
for row_axes, (corpus, frame) in zip(axes, groups):
    rs = [r for r in rows if r["corpus"] == corpus and r["frame"] == frame]
    names = [r["codec"] for r in rs]
    colors = ["#4c72b0" if n.startswith("cpu") else "#dd8452" for n in names]
    for ax, key, title in ((row_axes[0], "compress_gbs", "compress"), (row_axes[1], "decompress_gbs", "decompress")):
        bars = ax.bar(range(len(rs)), [r[key] for r in rs], color=colors)
        for b, r in zip(bars, rs):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"{r['ratio']:.1f}x", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(rs)))
        ax.set_xticklabels(names, rotation=40, ha="right", fontsize=8)
        ax.set_ylabel("GB/s, host to host")
        ax.set_title(f"{corpus}, {frame // 1024} KiB frames: {title} (label: ratio; blue CPU all cores, orange GPU)", fontsize=9)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=90)
