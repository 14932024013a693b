#!/usr/bin/env python3
"""Plot how long a program stands still for a checkpoint, against its size: stop-the-world (the
first checkpoint without and with the image reserve) and live (10% of memory written during the
copy, and writing continuously), with size / pinned D2H ceiling (a perfect stop-the-world copy)
for reference; one allocation and thousands. All from one bench_ckpt.sh run with
BENCH_CKPT_RESERVE=both (rows with and without "[reserve]").

usage: plot_stall.py <bench_ckpt output> <out.png>      (needs matplotlib)
"""
import re
import sys
from collections import defaultdict

FIRST = re.compile(r"^(\d+) GiB in (\d+) allocations?( \[reserve\])?: first checkpoint\s+"
                   r"[\d.]+\s+([\d.]+)\s")
LIVE = re.compile(r"^(\d+) GiB in (\d+) allocations?( \[reserve\])?: live, (10% written|writing "
                  r"continuously)\s+([\d.]+) ms")
CEILING = re.compile(r"^(\d+) GiB ceiling pinned D2H\s+([\d.]+)")


def parse(path):
    series = defaultdict(dict)  # label -> {GiB: seconds}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = FIRST.match(line)
            if m:
                layout = "1 allocation" if m.group(2) == "1" else "thousands"
                how = "stop-the-world, reserve" if m.group(3) else "stop-the-world"
                series[f"{how} ({layout})"][int(m.group(1))] = float(m.group(4))
                continue
            m = LIVE.match(line)
            if m and not m.group(3):  # live rows of the run without the reserve
                layout = "1 allocation" if m.group(2) == "1" else "thousands"
                series[f"live, {m.group(4)} ({layout})"][int(m.group(1))] = float(m.group(5)) / 1e3
                continue
            m = CEILING.match(line)
            if m:
                gib = int(m.group(1))
                series["size / pinned D2H ceiling"][gib] = gib * 2**30 / (float(m.group(2)) * 1e9)
    return series


def main():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = parse(sys.argv[1])
    if not series:
        sys.exit(f"{sys.argv[1]}: no bench_ckpt rows found")
    fig, ax = plt.subplots(figsize=(8, 5.2))
    for label, points in sorted(series.items()):
        sizes = sorted(points)
        style = "--" if "ceiling" in label else ":" if "thousands" in label else "-"
        ax.plot(sizes, [points[s] for s in sizes], style, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sorted({s for p in series.values() for s in p}))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("device memory (GiB)")
    ax.set_ylabel("stall: seconds the program stands still")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle("cudaw checkpoint stall on one H100 (bench_ckpt)")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
