#!/usr/bin/env python3
"""Plot bench_ckpt's table: checkpoint and resume GB/s against size, for cudaw's first, repeated
and delta checkpoints (one allocation and thousands), the pinned copy ceilings and NVIDIA's
driver checkpoint, all measured in the same run.

usage: plot_ckpt.py <bench_ckpt output> <out.png>      (needs matplotlib)
"""
import re
import sys
from collections import defaultdict

ROW = re.compile(r"^(\d+) GiB (.+?)\s{2,}([\d.]+)\s+([\d.]+|-)\s+([\d.]+)x?\s*$")


def parse(path):
    series = defaultdict(dict)  # label -> {GiB: GB/s}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = ROW.match(line.rstrip("\n"))
            if not m:
                continue
            gib, what, gbps = int(m.group(1)), m.group(2), float(m.group(3))
            layout = "1 allocation" if " 1 allocation" in what else "thousands"
            what = re.sub(r"in \d+ allocations?: ", "", what)
            if what.startswith("ceiling"):
                series[what.replace("ceiling ", "")][gib] = gbps
            elif what.startswith("driver"):
                series["NVIDIA driver " + what.split("Process")[-1].lower()][gib] = gbps
            else:
                series[f"{what} ({layout})"][gib] = gbps
    return series


def main():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = parse(sys.argv[1])
    if not series:
        sys.exit(f"{sys.argv[1]}: no bench_ckpt rows found")
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    panels = [("checkpoint (device -> host)", ("checkpoint", "D2H")),
              ("resume (host -> device)", ("resume", "H2D", "restore"))]
    for ax, (title, words) in zip(axes, panels):
        for label, points in sorted(series.items()):
            if not any(w in label for w in words):
                continue
            sizes = sorted(points)
            style = "--" if "pinned" in label else ":" if "driver" in label else "-"
            ax.plot(sizes, [points[s] for s in sizes], style, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sorted({s for p in series.values() for s in p}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("device memory (GiB)")
        ax.set_ylabel("GB/s (request -> paused / running)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("cudaw checkpoint/resume on one H100 (bench_ckpt; delta = 10% of chunks changed)")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
