#!/usr/bin/env python3
"""A PyTorch "notebook" for the sharing benchmarks: it holds GIB of GPU memory (a ballast of a
known pattern and a small working set), then ROUNDS times computes for STEPS matrix-product steps
(cuBLAS, elementwise kernels, and a slice of the ballast rewritten) and sits idle for IDLE seconds
without any CUDA call, as a person reading a notebook's output does.

usage: notebook.py GIB STEPS IDLE_SECONDS ROUNDS
       notebook.py calibrate SECONDS      prints "STEPS n": steps that take about SECONDS here
Prints "notebook: round r compute S s" per round (the time of its compute phase, a wait for the
GPU included) and, at the end, "notebook: done checksum=X": a checksum of every tensor it holds,
the ballast's taken on the GPU piece by piece (each weighted by its index). Deterministic: fixed
data, no atomics, and the idle time does not change it, so a shared run must print the checksum
of a solo run.
"""
import hashlib
import sys
import time

import torch

dev = torch.device("cuda")
n = 2048


def working_set():
    g = torch.Generator().manual_seed(7)
    w = (torch.randn(n, n, generator=g) / n ** 0.5).to(dev)
    x = torch.randn(n, n, generator=g).to(dev)
    return w, x


def step(w, x):
    return torch.tanh(w @ x) * 0.999


if sys.argv[1:2] == ["calibrate"]:
    seconds = float(sys.argv[2])
    w, x = working_set()
    for _ in range(20):
        x = step(w, x)
    torch.cuda.synchronize()
    t0, count = time.time(), 0
    while time.time() - t0 < 2.0:
        for _ in range(50):
            x = step(w, x)
        torch.cuda.synchronize()
        count += 50
    print("STEPS %d" % int(count / (time.time() - t0) * seconds), flush=True)
    sys.exit(0)

if len(sys.argv) != 5:
    sys.exit(__doc__)
gib, steps, idle, rounds = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
w, x = working_set()
elements = max(int(gib * (1 << 30)) - 2 * n * n * 4, 0) // 8
ballast = torch.arange(elements, dtype=torch.int64, device=dev)
ballast.mul_(0x9E3779B97F4A7C15 - (1 << 64))  # wraps: a pattern that differs in every byte
torch.cuda.synchronize()
print("notebook: allocated %d bytes" % (elements * 8 + 2 * n * n * 4), flush=True)
piece = 1 << 26
for r in range(1, rounds + 1):
    t0 = time.time()
    for s in range(steps):
        x = step(w, x)
    # A slice of the ballast changes every round: an image restored stale fails the checksum.
    start = (r * 7919 * piece) % max(elements - piece, 1)
    ballast[start:start + piece].add_(r)
    torch.cuda.synchronize()
    print("notebook: round %d compute %.3f s" % (r, time.time() - t0), flush=True)
    if idle > 0:
        time.sleep(idle)

h = hashlib.sha256()
for t in (w, x):
    h.update(t.cpu().numpy().tobytes())
sums = torch.stack([(ballast[i:i + piece] * (i // piece + 1)).sum()
                    for i in range(0, elements, piece)]) if elements else torch.zeros(1, dtype=torch.int64)
h.update(sums.cpu().numpy().tobytes())
print("notebook: done checksum=%s" % h.hexdigest()[:16], flush=True)
